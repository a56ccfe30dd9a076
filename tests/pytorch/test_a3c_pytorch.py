"""A3C on PyTorch with the live Pong environment: the paper's network size, n-step returns, the
emulator running offline in actor processes, rollouts, the update, AMP."""

import math

import numpy as np
import pytest
import torch

from model_checks import assert_loss_falls
from tbdkit.spec import catalog
from tbdkit.adapters.pytorch import Precision

MODEL = catalog.get("a3c")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
CPU = torch.device("cpu")
HP = MODEL.hp("smoke")


def expected_parameters(hp):
    k1, k2 = hp["conv1_kernel"], hp["conv2_kernel"]
    side = ((hp["frame_height"] - k1) // hp["conv1_stride"] + 1 - k2) // hp["conv2_stride"] + 1  # 84 -> 20 -> 9
    conv = hp["frame_stack"] * hp["conv1_channels"] * k1 * k1 + hp["conv1_channels"]
    conv += hp["conv1_channels"] * hp["conv2_channels"] * k2 * k2 + hp["conv2_channels"]
    fc = hp["conv2_channels"] * side * side * hp["hidden"] + hp["hidden"]
    return conv + fc + (hp["hidden"] + 1) * hp["actions"] + hp["hidden"] + 1


def test_network_is_the_papers():
    model = WORKLOAD.PolicyValue(MODEL.hp("paper"))
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(MODEL.hp("paper")) == 677_943
    logits, values = model(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert logits.shape == (3, 6) and values.shape == (3,)


def test_n_step_returns():
    rewards = torch.tensor([[0.0], [1.0], [0.0]])
    dones = torch.tensor([[False], [True], [False]])
    returns = WORKLOAD.n_step_returns(rewards, dones, torch.tensor([10.0]), 0.5)
    assert returns.flatten().tolist() == [0.5, 1.0, 5.0]      # the episode end cuts the bootstrap


def test_pong_runs_offline_and_scores():
    env = DATA.Pong(HP, seed=0)
    obs = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.max() > 0
    rewards = [env.step(0)[1] for _ in range(400)]        # standing still, the agent loses points
    assert set(rewards) <= {-1.0, 0.0, 1.0} and rewards.count(-1.0) >= 1
    env.env.close()


@pytest.fixture(scope="module")
def batch():
    it = DATA.batches("synthetic", HP, 2, seed=0)
    b = next(it)
    yield b
    b.actors.close()


def test_actors_play_in_processes(batch):
    assert batch.samples == 2 * 5 and batch.work == 2 * 5 and batch.extra_work == {"frames": 2 * 5 * 4}
    assert all(p.is_alive() for p in batch.actors.processes)
    obs, rewards, dones = batch.actors.step(np.array([0, 1]))
    assert obs.shape == (2, 4, 84, 84) and rewards.shape == dones.shape == (2,)
    np.testing.assert_array_equal(batch.actors.observation, obs)


def test_rollout_and_update_reduce_the_loss_on_a_fixed_rollout(batch):
    torch.manual_seed(0)
    training = WORKLOAD.build(HP, CPU)
    precision = Precision("fp32", CPU)
    rollout = WORKLOAD.play(training, batch.actors, HP["t_max"], CPU, precision)
    assert rollout.observations.shape == (5, 2, 4, 84, 84) and rollout.actions.shape == (5, 2)
    rollout.rewards[-1] = torch.tensor([1.0, -1.0])           # a point won and a point lost on the last step
    assert_loss_falls([float(WORKLOAD.update(training, rollout, precision)) for _ in range(8)], 0.9)


def test_train_step_and_amp(batch):
    training = WORKLOAD.build(HP, CPU)
    for mode in ("fp32", "amp"):
        precision = Precision(mode, CPU)
        assert math.isfinite(float(WORKLOAD.train_step(training, WORKLOAD.to_device(batch, CPU), precision)))
    Precision("fp32", CPU)


EXIT_SCRIPT = """
import signal, sys
from tbdkit.spec import catalog
signal.signal(signal.SIGTERM, lambda *a: print("ignored SIGTERM", flush=True))  # as the agent's StopFlag does
m = catalog.get("a3c")
batch = next(catalog.load_module(m, "data").batches("synthetic", m.hp("smoke"), 2, 0))
print("actors", len(batch.actors.processes), flush=True)
"""


def test_the_learner_exits_with_its_actors_running():
    """Forked actors must not inherit the learner's SIGTERM handler: exit terminates them."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "actors 2" in proc.stdout and "ignored SIGTERM" not in proc.stdout


def test_converge_scores_the_episodes_the_actors_finish():
    """A full Pong episode under random play: its score is whole points in [-21, 21], the running
    return starts again at 0, and the task's score is the mean of the last `episodes_window`."""
    hp = {**MODEL.hp("converge"), "episodes_window": 1}
    task = DATA.convergence_task("synthetic", hp, 1, seed=0)
    actors = task.actors
    try:
        assert task.held_out == [] and task.score() is None
        rng = np.random.default_rng(0)
        for _ in range(20_000):  # a random-play episode lasts about a thousand agent steps
            actors.step(rng.integers(0, hp["actions"], 1))
            if actors.episodes:
                break
        (score,) = actors.episodes
        assert -21 <= score <= 21 and score == int(score) and score < 0  # random play loses
        assert actors.returns[0] == 0.0
        assert task.score() == score
        assert next(task.train).actors is actors
    finally:
        actors.close()
