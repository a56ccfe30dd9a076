"""Every MXNet workload built, fed and trained on a context other than the default one: its
parameters, their gradients, the optimizer's state and the loss all live there. Arrays made without
a context during the step are steered to a third context (the default-context scope), so one that
reaches the loss shows up. (MXNet does not refuse to mix CPU contexts, so the check looks at where
every array ended up; on a GPU the same mistake is an error or a silent host copy.)"""

from __future__ import annotations

import mxnet as mx
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import Precision

RUN = mx.cpu(1)        # the run's "device"
STRAY = mx.cpu(2)      # where a context-less array lands during the step
MXNET_MODELS = sorted(n for n, m in catalog.models().items() if "mxnet" in m.frameworks)


def arrays(state):
    if isinstance(state, mx.nd.NDArray):
        yield state
    elif isinstance(state, (list, tuple)):
        for s in state:
            yield from arrays(s)


def test_a_context_less_array_is_caught():
    x = mx.nd.ones(3, ctx=RUN)
    with mx.Context(STRAY):
        y = mx.nd.ones(3) * x  # made without a context: lands on STRAY, and so does the product
    assert y.ctx == STRAY


@pytest.mark.parametrize("name", MXNET_MODELS)
def test_workload_keeps_every_array_on_the_run_context(name):
    model = catalog.get(name)
    workload, data = catalog.load_module(model, "mxnet"), catalog.load_module(model, "data")
    hp = model.hp("smoke")
    training = workload.build(hp, RUN)
    inputs = workload.to_device(next(data.batches("synthetic", hp, 2, seed=0)), RUN)
    with mx.Context(STRAY):
        loss = workload.train_step(training, inputs, Precision("fp32", False))
    mx.nd.waitall()
    assert loss.ctx == RUN
    where = {}
    for key, p in training.model.collect_params().items():
        where[key] = p.list_ctx()
        if p.grad_req != "null":
            where[f"{key} grad"] = [g.ctx for g in p.list_grad()]
    trainers = [t for t in vars(training).values() if isinstance(t, mx.gluon.Trainer)]
    for t in trainers:
        for updater in t._updaters:
            for i, state in updater.states.items():
                where[f"optimizer state {i}"] = [a.ctx for a in arrays(state)]
    stray = {k: v for k, v in where.items() if any(c != RUN for c in v)}
    assert where and not stray, stray
