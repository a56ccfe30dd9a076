"""The artifact for reviewers: the bundle, its reproduction and ARTIFACT.md."""
