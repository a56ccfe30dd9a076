"""MXNet's memory breakdown on a network small enough to count by hand (CPU, the real MXNet 1.9
storage profiler). Runs in the MXNet stack."""

from types import SimpleNamespace

import mxnet as mx
from mxnet import autograd, gluon

from tbdkit.adapters.mxnet_memory import BACKWARD, START, breakdown, held_at_backward_starts


def tiny(batch: int, as_workloads: bool = False):
    """Dense(100 -> 64, ReLU), Dense(64 -> 10), loss = sum of the outputs. `as_workloads`: built and
    stepped as every MXNet workload is: hybridized with static_alloc, the input made inside the step
    (the agent's prepare), backward called inside the autograd.record() scope."""
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu", in_units=100), gluon.nn.Dense(10, in_units=64))
    net.initialize(ctx=mx.cpu())
    if as_workloads:
        net.hybridize(static_alloc=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    given = mx.nd.random.uniform(shape=(batch, 100))

    def step() -> None:
        x = mx.nd.random.uniform(shape=(batch, 100)) if as_workloads else given
        with autograd.record():
            loss = net(x).sum()
            if as_workloads:
                autograd.backward(loss)
        if not as_workloads:
            loss.backward()
        trainer.step(batch)
        mx.nd.waitall()

    step()  # the first step creates the optimizer state; measure a later one
    step()
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]

    def state() -> int:
        return sum(int(s.size) * 4 for u in trainer._updaters for s in u.states.values() if s is not None)

    return SimpleNamespace(params=params, step=step, state=state, blocks=[net])


def test_breakdown_of_a_two_layer_network_by_hand():
    """Weights and their gradient buffers: (100 x 64 + 64 + 64 x 10 + 10) floats. Held when backward
    begins, of what the step allocated (the input was made before it): the ReLU output (N x 64; the
    first layer's pre-activation and the second layer's output are freed, their backward does not
    need them) and the loss (one float): 256N + 4 bytes."""
    params_bytes = (100 * 64 + 64 + 64 * 10 + 10) * 4
    for batch in (8, 32):
        t = tiny(batch)
        cats = breakdown(t.params, t.state, mx.cpu(), t.step, t.blocks)["categories"]
        assert cats["weights"]["bytes"] == params_bytes
        assert cats["weight_gradients"]["bytes"] == params_bytes
        assert cats["dynamic"]["bytes"] == params_bytes        # one momentum buffer per weight
        assert cats["feature_maps"]["bytes"] == 256 * batch + 4, cats["feature_maps"]
        assert cats["workspace"]["bytes"] is None and cats["workspace"]["reason"]


def test_gradients_are_measured_not_copied_from_the_weights():
    """A frozen layer (grad_req 'null') has weights but no gradient buffer."""
    t = tiny(4)
    t.params[0].grad_req = "null"  # the first layer's weight
    cats = breakdown(t.params, t.state, mx.cpu(), lambda: None, t.blocks)["categories"]
    assert cats["weights"]["bytes"] - cats["weight_gradients"]["bytes"] == 100 * 64 * 4
    assert cats["feature_maps"]["bytes"] is None and "backward" in cats["feature_maps"]["reason"]


def test_feature_maps_of_a_network_stepped_as_the_workloads_are_by_hand():
    """Every MXNet workload hybridizes with static_alloc (its buffers outlive the step) and calls
    backward inside its autograd.record() scope (which frees the activations before the scope
    closes). Held when backward begins: the input (N x 100, made in the step), the ReLU output
    (N x 64), the network's output (N x 10: the hybridized graph keeps its outputs for its backward)
    and the loss (one float): 696N + 4 bytes, at any batch."""
    for batch in (8, 32):
        t = tiny(batch, as_workloads=True)
        for _ in range(2):  # measured twice: the cached graph the first measurement rebuilt is cleared again
            cats = breakdown(t.params, t.state, mx.cpu(), t.step, t.blocks)["categories"]
            assert cats["feature_maps"]["bytes"] == (100 + 64 + 10) * 4 * batch + 4, cats["feature_maps"]
        t.step()  # and the network still trains after it


def test_garbage_of_earlier_steps_is_not_subtracted_from_the_step():
    """The storage profiler subtracts what is freed while it runs if it counted its allocation: an
    array a measured step made and left in a reference cycle, freed by Python's collector inside a
    later measured step, would lower that step's figure by its bytes. The second step below drops the
    first one's array and makes the collector run at every allocation: the figure is still 696N + 4
    bytes, and the collector is on again after."""
    import gc

    batch = 8
    t = tiny(batch, as_workloads=True)
    earlier: dict = {}

    def first() -> None:
        t.step()
        held: list = [mx.nd.ones((batch, 100))]
        held.append(held)  # a cycle: only the collector frees it
        earlier["cycle"] = held

    def second() -> None:
        earlier.clear()  # the cycle is garbage now
        thresholds = gc.get_threshold()
        gc.set_threshold(1)
        try:
            t.step()
        finally:
            gc.set_threshold(*thresholds)

    breakdown(t.params, t.state, mx.cpu(), first, t.blocks)
    cats = breakdown(t.params, t.state, mx.cpu(), second, t.blocks)["categories"]
    assert cats["feature_maps"]["bytes"] == (100 + 64 + 10) * 4 * batch + 4, cats["feature_maps"]
    assert gc.isenabled()


def test_held_bytes_are_read_at_each_backward_start():
    """A constructed trace (the layout MXNet's profiler dumps): the counter at each backward start less
    its value at the step's start; the most over two backward passes."""
    c = "Memory: gpu/0"
    events = [{"ph": "C", "name": c, "ts": 1, "args": {c: 1000}},
              {"name": START, "ph": "i", "ts": 2},
              {"ph": "C", "name": c, "ts": 3, "args": {c: 1500}},
              {"name": BACKWARD, "ph": "i", "ts": 4},
              {"ph": "C", "name": c, "ts": 5, "args": {c: 1000}},
              {"ph": "C", "name": c, "ts": 6, "args": {c: 1800}},
              {"name": BACKWARD, "ph": "i", "ts": 7},
              {"ph": "C", "name": "Memory: cpu/0", "ts": 6, "args": {"Memory: cpu/0": 10**9}}]
    assert held_at_backward_starts(events, c) == 800
    assert held_at_backward_starts(events[:3], c) is None


def test_deep_speech_2_feature_maps_grow_with_the_batch():
    """Deep Speech 2 (smoke preset) with every utterance 2 s long (199 frames), at batch 2 and 4: the
    two convolutions' outputs alone, which batch norm's backward needs, are 32 x 81 x 100 and
    32 x 41 x 100 floats an utterance (1.56 MB), so two more utterances hold at least 3.1 MB more.
    Measured: 33.0 and 44.6 MiB (PyTorch, the same batches: 12.5 and 24.9 MiB); the part that does
    not grow (about 21 MiB) is the GRUs' weights, which MXNet's fused RNN copies into one flat array
    and oneDNN reorders, held for backward."""
    from tbdkit.adapters.mxnet import MXNetAdapter
    from tbdkit.spec import catalog

    model = catalog.get("deepspeech2")
    hp = model.hp("smoke")
    hp.update(duration_min_s=1.99, duration_max_s=2.01, duration_typical_low_s=2.0,
              duration_typical_high_s=2.0, duration_typical_fraction=1.0)
    data = catalog.load_module(model, "data")
    held = {}
    for batch in (2, 4):
        adapter = MXNetAdapter(catalog.load_module(model, "mxnet"), hp, device="cpu", precision="fp32", seed=0)
        batches = data.synthetic_batches(hp, batch, 0)

        def step() -> None:
            adapter.step(adapter.prepare(next(batches)))

        step()
        held[batch] = adapter.memory_breakdown(step)["categories"]["feature_maps"]["bytes"]
    conv_outputs = 32 * (81 + 41) * 100 * 4
    assert held[4] - held[2] >= 2 * conv_outputs, held
    assert held[2] >= 2 * conv_outputs


def test_the_mxnet_adapter_has_the_core_and_its_capabilities() -> None:
    from model_checks import assert_capabilities

    assert_capabilities("mxnet", {"graph_compile", "memory_breakdown", "optimizer_state", "parameter_sync"})
