"""Host-side runs: the planner for bench and sweep, what they tell the user (progress), run lists, sweeps,
reference runs."""
