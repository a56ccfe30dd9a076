"""The network as a framework builds it, in one canonical form: `canonical` (layer kinds, layouts,
FLOPs), one module per framework that reads its layers (`pytorch`, `tensorflow`, `mxnet`: each
imported only in its own stack), and `network` (`tbdkit describe`, `python -m tbdkit.describe`)."""

from __future__ import annotations

from tbdkit.describe.network import describe, in_stack, main

__all__ = ["describe", "in_stack", "main"]
