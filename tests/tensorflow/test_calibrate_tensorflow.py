"""TensorFlow's GPU memory probe of `tbdkit calibrate`, for real in the TensorFlow stack: on a machine
without a GPU it says why (TensorFlow's own reason), never a number."""

from tbdkit.calibrate import gpu_memory


def test_memory_probe_is_unsupported_with_the_reason_on_cpu():
    r = gpu_memory.tensorflow_probe(0)
    assert r.instrument == "tensorflow.gpu_memory" and r.measured is None
    assert r.status == "unsupported" and "TensorFlow" in r.verdict
