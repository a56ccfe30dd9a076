"""The frameworks' GPU memory counters against a tensor of known size: allocate TENSOR_MIB on the GPU
and the framework's counter must rise by that much.

- PyTorch: torch.cuda.max_memory_allocated after reset_peak_memory_stats (the counter behind the
  runs' framework_peak_allocated);
- TensorFlow: tf.config.experimental.get_memory_info(...)["peak"] after reset_memory_stats;
- MXNet: mx.context.gpu_memory_info (free bytes on the device: MXNet 1.9 has no peak counter of
  its own), read after a warm-up allocation has created the context and its pool.

Each runs in its own stack's interpreter (tbdkit.calibrate.stack); a framework that sees no GPU
reports `unsupported` with its own reason (tbdkit.adapters.<framework>.gpu_probe).
"""

from __future__ import annotations

import importlib
from typing import Any

from tbdkit.calibrate.verdict import ProbeResult, Tolerance, judge, unsupported

TENSOR_MIB = 256
# the allocators round a block up (PyTorch 512 B, TensorFlow's BFC 256 B, cudaMalloc 2 MiB pages)
MEMORY_TOLERANCE = Tolerance(relative=0.01, absolute=2.0)  # MiB
COUNTERS = {
    "pytorch": "torch.cuda.max_memory_allocated (peak reset before)",
    "tensorflow": "tf.config.experimental.get_memory_info()['peak'] (peak reset before)",
    "mxnet": "mx.context.gpu_memory_info(): drop in free bytes",
}
MIB = 2**20


def memory_result(
    framework: str, mib: float, rise_bytes: float | None, why: str | None = None, **details: Any
) -> ProbeResult:
    probe = f"allocate a {mib:g} MiB tensor on the GPU"
    instrument = f"{framework}.gpu_memory"
    if rise_bytes is None:
        return ProbeResult(
            instrument,
            probe,
            mib,
            None,
            "MiB",
            MEMORY_TOLERANCE,
            unsupported(why or "not measured"),
            ("framework_peak_allocated",),
            {"counter": COUNTERS[framework], **details},
        )
    rise = rise_bytes / MIB
    return ProbeResult(
        instrument,
        probe,
        mib,
        rise,
        "MiB",
        MEMORY_TOLERANCE,
        judge(mib, rise, MEMORY_TOLERANCE, "MiB"),
        ("framework_peak_allocated",),
        {"counter": COUNTERS[framework], **details},
    )


TITLES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mxnet": "MXNet"}


def unavailable(framework: str, index: int) -> str | None:
    """Why `framework` cannot use GPU `index` (its adapter's own gpu_probe), or None when it can."""
    gpus, why = importlib.import_module(f"tbdkit.adapters.{framework}").gpu_probe()
    if index < gpus:
        return None
    title = TITLES[framework]
    return f"{title} sees no GPU: {why}" if why else f"{title} sees {gpus} GPU(s), not GPU {index}"


def _elements(mib: float) -> int:
    return int(mib * MIB) // 4  # float32


def pytorch_probe(index: int, mib: float = TENSOR_MIB) -> ProbeResult:
    import torch

    why = unavailable("pytorch", index)
    if why:
        return memory_result("pytorch", mib, None, why)
    dev = torch.device(f"cuda:{index}")
    torch.zeros(1, device=dev)  # the context and the allocator exist before the reading
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.max_memory_allocated(dev)
    block = torch.ones(_elements(mib), device=dev)
    torch.cuda.synchronize(dev)
    rise = torch.cuda.max_memory_allocated(dev) - before
    del block
    return memory_result("pytorch", mib, rise, before_bytes=before)


def tensorflow_probe(index: int, mib: float = TENSOR_MIB) -> ProbeResult:
    import tensorflow as tf

    why = unavailable("tensorflow", index)
    if why:
        return memory_result("tensorflow", mib, None, why)
    name = f"GPU:{index}"
    with tf.device(name):
        tf.zeros([1]).numpy()
        tf.config.experimental.reset_memory_stats(name)
        before = tf.config.experimental.get_memory_info(name)["current"]
        block = tf.ones([_elements(mib)])
        block[:1].numpy()
        rise = tf.config.experimental.get_memory_info(name)["peak"] - before
    del block
    return memory_result("tensorflow", mib, rise, before_bytes=before)


def mxnet_probe(index: int, mib: float = TENSOR_MIB) -> ProbeResult:
    import mxnet as mx

    why = unavailable("mxnet", index)
    if why:
        return memory_result("mxnet", mib, None, why)
    ctx = mx.gpu(index)
    mx.nd.zeros((1,), ctx=ctx).wait_to_read()
    free_before, total = mx.context.gpu_memory_info(index)
    block = mx.nd.ones((_elements(mib),), ctx=ctx)
    block.wait_to_read()
    free_after, _ = mx.context.gpu_memory_info(index)
    del block
    return memory_result(
        "mxnet",
        mib,
        free_before - free_after,
        total_bytes=total,
        note="device-wide free memory: another process allocating meanwhile moves it",
    )


PROBES = {"pytorch": pytorch_probe, "tensorflow": tensorflow_probe, "mxnet": mxnet_probe}
