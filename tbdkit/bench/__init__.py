"""Host-side runs: the planner for bench and sweep, run lists, sweeps, reference runs."""
