"""A3C on MXNet with the live Pong environment: the paper's network size, n-step returns, the
rollout played by actor processes, the update (loss falls on a fixed rollout), the optimizer
settings. Runs in the MXNet stack (`make test-mxnet`)."""

import math

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from tbdkit.adapters.mxnet import MXNetAdapter, Precision
from model_checks import assert_same_frames_for_the_same_seed

MODEL = catalog.get("a3c")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


def adapter():
    return MXNetAdapter(WORKLOAD, HP, device="cpu", precision="fp32", seed=0)


def test_network_is_the_papers():
    training = WORKLOAD.build(MODEL.hp("paper"), mx.cpu())
    assert sum(int(np.prod(p.shape)) for p in training.model.collect_params().values()) == 677_943  # as tests/pytorch
    logits, values = training.model(mx.nd.zeros((3, 4, 84, 84), dtype=np.uint8))
    assert logits.shape == (3, 6) and values.shape == (3,)


def test_n_step_returns():
    rewards, dones = mx.nd.array([[0.0], [1.0], [0.0]]), mx.nd.array([[0.0], [1.0], [0.0]])
    returns = WORKLOAD.n_step_returns(rewards, dones, mx.nd.array([10.0]), 0.5)
    assert returns.asnumpy().flatten().tolist() == [0.5, 1.0, 5.0]     # the episode end cuts the bootstrap


def test_optimizer_comes_from_the_hyperparameters():
    opt = adapter().training.trainer._optimizer
    assert type(opt).__name__ == "RMSProp" and not opt.centered
    assert (opt.learning_rate, opt.gamma1, opt.epsilon) == (HP["learning_rate"], HP["rmsprop_alpha"],
                                                             HP["rmsprop_epsilon"])


@pytest.fixture(scope="module")
def batch():
    b = next(DATA.batches("synthetic", HP, 2, seed=0))
    yield b
    b.actors.close()


def test_rollout_and_update_reduce_the_loss_on_a_fixed_rollout(batch):
    a = adapter()
    rollout = WORKLOAD.play(a.training, batch.actors, HP["t_max"], a.ctx)
    assert rollout.observations.shape == (5, 2, 4, 84, 84) and rollout.actions.shape == (5, 2)
    rollout.rewards[-1] = mx.nd.array([1.0, -1.0])          # a point won and a point lost on the last step
    losses = [a.loss_value(WORKLOAD.update(a.training, rollout, a.precision)) for _ in range(8)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0] * 0.9, losses


def test_gradients_are_clipped_to_the_global_norm(batch):
    a = adapter()
    rollout = WORKLOAD.play(a.training, batch.actors, HP["t_max"], a.ctx)
    rollout.rewards[:] = 100.0                              # huge returns: huge value-loss gradients
    WORKLOAD.update(a.training, rollout, a.precision)
    grads = [p.grad().asnumpy() for p in a.training.model.collect_params().values()]
    assert math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads)) == pytest.approx(
        HP["max_grad_norm"], rel=1e-3)


def test_train_step_through_the_adapter(batch):
    a = adapter()
    assert math.isfinite(a.loss_value(a.step(a.prepare(batch))))
    with pytest.raises(RuntimeError, match="needs a GPU"):
        Precision("amp", on_gpu=False)
    Precision("fp32", on_gpu=False)


def test_same_seed_same_frames(pong_frames):
    """The environment runs in this stack (numpy < 1.24) and is the same for the same seed and actions."""
    assert_same_frames_for_the_same_seed(lambda: pong_frames(DATA, HP))
