"""MXNet's GPU memory probe of `tbdkit calibrate`, for real in the MXNet stack: on a machine without a
GPU it says why (MXNet's own reason), never a number."""

from tbdkit.calibrate import gpu_memory


def test_memory_probe_is_unsupported_with_the_reason_on_cpu():
    r = gpu_memory.mxnet_probe(0)
    assert r.instrument == "mxnet.gpu_memory" and r.measured is None
    assert r.status == "unsupported" and "MXNet" in r.verdict
