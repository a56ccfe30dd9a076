"""MXNet's memory breakdown on a network small enough to count by hand (CPU, the real MXNet 1.9
storage profiler). Runs in the MXNet stack."""

from types import SimpleNamespace

import mxnet as mx
from mxnet import autograd, gluon

from tbdkit.adapters.mxnet_memory import breakdown, held_at_record_ends, RECORD_END, START


def tiny(batch: int):
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu", in_units=100), gluon.nn.Dense(10, in_units=64))
    net.initialize(ctx=mx.cpu())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    x = mx.nd.random.uniform(shape=(batch, 100))

    def step() -> None:
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        trainer.step(batch)
        mx.nd.waitall()

    step()  # the first step creates the optimizer state; measure a later one
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]

    def state() -> int:
        return sum(int(s.size) * 4 for u in trainer._updaters for s in u.states.values() if s is not None)

    return SimpleNamespace(params=params, step=step, state=state)


def test_breakdown_of_a_two_layer_network_by_hand():
    """Weights and their gradient buffers: (100 x 64 + 64 + 64 x 10 + 10) floats. Held when the record
    scope closes: the ReLU output (N x 64; the first layer's pre-activation and the second layer's
    output are freed, their backward does not need them) and the loss (one float): 256N + 4 bytes."""
    params_bytes = (100 * 64 + 64 + 64 * 10 + 10) * 4
    for batch in (8, 32):
        t = tiny(batch)
        cats = breakdown(t.params, t.state, mx.cpu(), t.step)["categories"]
        assert cats["weights"]["bytes"] == params_bytes
        assert cats["weight_gradients"]["bytes"] == params_bytes
        assert cats["dynamic"]["bytes"] == params_bytes        # one momentum buffer per weight
        assert cats["feature_maps"]["bytes"] == 256 * batch + 4, cats["feature_maps"]
        assert cats["workspace"]["bytes"] is None and cats["workspace"]["reason"]


def test_gradients_are_measured_not_copied_from_the_weights():
    """A frozen layer (grad_req 'null') has weights but no gradient buffer."""
    t = tiny(4)
    t.params[0].grad_req = "null"  # the first layer's weight
    cats = breakdown(t.params, t.state, mx.cpu(), lambda: None)["categories"]
    assert cats["weights"]["bytes"] - cats["weight_gradients"]["bytes"] == 100 * 64 * 4
    assert cats["feature_maps"]["bytes"] is None and "record" in cats["feature_maps"]["reason"]


def test_held_bytes_are_read_at_each_record_end():
    """A constructed trace (the layout MXNet's profiler dumps): the counter at each record end less
    its value at the step's start; the most over two record scopes."""
    c = "Memory: gpu/0"
    events = [{"ph": "C", "name": c, "ts": 1, "args": {c: 1000}},
              {"name": START, "ph": "i", "ts": 2},
              {"ph": "C", "name": c, "ts": 3, "args": {c: 1500}},
              {"name": RECORD_END, "ph": "i", "ts": 4},
              {"ph": "C", "name": c, "ts": 5, "args": {c: 1000}},
              {"ph": "C", "name": c, "ts": 6, "args": {c: 1800}},
              {"name": RECORD_END, "ph": "i", "ts": 7},
              {"ph": "C", "name": "Memory: cpu/0", "ts": 6, "args": {"Memory: cpu/0": 10**9}}]
    assert held_at_record_ends(events, c) == 800
    assert held_at_record_ends(events[:3], c) is None


def test_the_mxnet_adapter_has_the_core_and_its_capabilities() -> None:
    from model_checks import assert_capabilities

    assert_capabilities("mxnet", {"memory_breakdown", "optimizer_state", "parameter_sync"})
