"""Several replicas in one MXNet process (--one-process): a context each, the `device` kvstore
between them. On the CPU the contexts are cpu(0) and cpu(1), as GPUs would be gpu(0) and gpu(1).
Runs in the MXNet stack."""

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter
from tbdkit.adapters.replicas import split

MODEL = catalog.get("resnet50")
HP = {**MODEL.hp("smoke"), "image_size": 32, "num_classes": 10}
DATA = catalog.load_module(MODEL, "data")


def make(replicas: int = 1) -> MXNetAdapter:
    return MXNetAdapter(catalog.load_module(MODEL, "mxnet"), HP, "cpu", "fp32", 0, replicas=replicas)


def weights(a: MXNetAdapter, ctx: mx.Context) -> dict[str, np.ndarray]:
    return {p.name: p.data(ctx).asnumpy() for p in a._trainable()}


def test_the_first_update_is_the_mean_of_the_replicas_updates():
    """SGD with momentum's first step is linear in the gradient: the one-process step on parts A and
    B must give the mean of the weights two single-replica steps give from the same start, one on A
    and one on B (batch norm normalizes each part by its own statistics in both). A sum instead of
    a mean, or a replica left out, moves the weights by twice or half as much."""
    batch = next(DATA.batches("synthetic", HP, 4, 1))
    both = make(replicas=2)
    start = weights(both, mx.cpu(0))
    assert both.backend == "kvstore device (2 replicas in one process)"
    assert both.environment()["kvstore"] == "device" and both.environment()["replica_contexts"] == ["cpu(0)", "cpu(1)"]
    inputs = both.prepare(batch)
    assert [d["images"].context for d in inputs] == [mx.cpu(0), mx.cpu(1)]
    loss = both.loss_value(both.step(inputs))

    singles = []
    for part in split(batch, 2):
        one = make()
        for p in one._trainable():
            p.set_data(mx.nd.array(start[p.name]))
        singles.append((one.loss_value(one.step(one.prepare(part))), weights(one, mx.cpu())))
    assert both.training.trainer._kvstore.type == "device"
    assert loss == pytest.approx(np.mean([s[0] for s in singles]), rel=1e-5)
    moved = 0.0
    for ctx in (mx.cpu(0), mx.cpu(1)):  # every replica holds the same updated weights
        after = weights(both, ctx)
        for name, w in after.items():
            # the updates compared (batch statistics over 2 samples make them large: float32 noise scales with them)
            update, expected = w - start[name], (singles[0][1][name] + singles[1][1][name]) / 2 - start[name]
            scale = float(np.abs(expected).max())
            ulp = 4 * np.finfo(np.float32).eps * float(np.abs(start[name]).max())  # a difference of float32 weights
            np.testing.assert_allclose(update, expected, rtol=1e-3, atol=max(1e-5 * scale, ulp), err_msg=name)
            moved = max(moved, scale)
    assert moved > 1e-4  # the step moved the weights


def test_split_keeps_the_order_and_refuses_uneven_parts():
    batch = next(DATA.batches("synthetic", HP, 6, 0))
    parts = split(batch, 3)
    assert [p.samples for p in parts] == [2, 2, 2]
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), batch.labels)
    with pytest.raises(ValueError, match="does not split into 4 equal parts"):
        split(batch, 4)


def test_more_replicas_than_gpus_is_one_sentence():
    from tbdkit.adapters.mxnet import replica_contexts

    with pytest.raises(RuntimeError, match=r"^--gpus-per-node 2 --one-process needs 2 GPUs and MXNet sees 0: ask for fewer"):
        replica_contexts(2, on_gpu=True)  # this machine has none
