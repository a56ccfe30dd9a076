"""The framework names the kit knows, in its order, and how each is written for a reader: a workload file, a
stack and a RunSpec name one of these.

`numpy` is the kit's machinery check, not a framework the paper compares: a small real training stack over NumPy
that runs in the kit's own environment (tbdkit.adapters.numpy), so the CLI, the agent, the launchers and the
results can be exercised in about a second. The paper's tables, figures, claim checks and framework comparisons
take only PAPER_FRAMEWORKS."""

from __future__ import annotations

PAPER_FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
MACHINERY = "numpy"  # the machinery check's stack: the kit's own environment, nothing to install
KNOWN_FRAMEWORKS = (*PAPER_FRAMEWORKS, MACHINERY)
TITLES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mxnet": "MXNet", "numpy": "NumPy"}
