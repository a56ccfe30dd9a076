"""The framework names the kit knows, in its order, and how each is written for a reader: a workload file, a
stack and a RunSpec name one of these."""

from __future__ import annotations

KNOWN_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
TITLES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mxnet": "MXNet"}
