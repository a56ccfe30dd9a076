"""tbdkit: a containerized reproducibility kit for TBD, the Training Benchmark for DNNs."""

__version__ = "0.1.0"
