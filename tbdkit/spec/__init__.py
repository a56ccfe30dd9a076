"""What to run: the model catalog, RunSpec, SweepSpec."""
