"""The agent: runs where the framework is (a stack's venv or a container) and measures one run."""
