"""`tbdkit calibrate`: each instrument measured against a workload whose true value is known by
construction, on the machine itself, before its numbers are trusted (docs/calibration.md)."""
