"""A3C's data: the live Atari Pong environment (gymnasium + ale-py, which ships the ROM), run by
several actor processes with DeepMind's preprocessing. There is no dataset and no synthetic
environment: the frames come from the emulator during training.

Framework neutral (NumPy, gymnasium, ale-py). Each actor process owns one Pong emulator; the
learner sends every actor an action and gets back the next stacked 4x84x84 observation, the
clipped reward and whether the episode ended (the actor then starts a new one). A batch is a
handle to the running actors plus the rollout length: the rollout itself is played inside the
training step, with the current policy choosing the actions, so its cost is part of the
measured iteration, as in A3C.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC  # the kit's default source; for A3C it means "the live environment"
from _shared.errors import DataError

Hparams = Mapping[str, Any]


# --------------------------------------------------------------------------------------------
# DeepMind preprocessing (Mnih et al. 2015, "Methods: Preprocessing")


def _bilinear_axis(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights for a half-pixel-centred linear resize along one axis."""
    x = np.clip((np.arange(size_out) + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, size_in - 1)
    return lo, hi, (x - lo).astype(np.float32)


def resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of a 2-D uint8 frame (NumPy only: no OpenCV)."""
    r0, r1, wr = _bilinear_axis(frame.shape[0], height)
    c0, c1, wc = _bilinear_axis(frame.shape[1], width)
    f = frame.astype(np.float32)
    rows = f[r0] * (1 - wr)[:, None] + f[r1] * wr[:, None]
    out = rows[:, c0] * (1 - wc)[None, :] + rows[:, c1] * wc[None, :]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def preprocess(last_two: tuple[np.ndarray, np.ndarray], hp: Hparams) -> np.ndarray:
    """Max over the last two grayscale frames (removes Atari flicker), resized to 84x84."""
    return resize(np.maximum(*last_two), int(hp["frame_height"]), int(hp["frame_width"]))


# --------------------------------------------------------------------------------------------
# One environment


def make_env(hp: Hparams) -> Any:
    """The raw emulator: one frame per step, grayscale, deterministic actions, minimal action set."""
    try:
        import ale_py
        import gymnasium as gym
    except ImportError as e:
        raise DataError(f"A3C needs gymnasium and ale-py ({e}): run `tbdkit setup FRAMEWORK` "
                        "(every stack installs them)") from e
    gym.register_envs(ale_py)
    return gym.make(hp["env_id"], obs_type="grayscale", frameskip=1, repeat_action_probability=0.0,
                    full_action_space=False)


class Pong:
    """DeepMind's Atari wrapper: action repeat with max-pooling, no-op starts, reward clipping,
    a stack of the last frames; a finished episode starts a new one."""

    def __init__(self, hp: Hparams, seed: int) -> None:
        self.hp = hp
        self.env = make_env(hp)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.stack = np.zeros((int(hp["frame_stack"]), int(hp["frame_height"]), int(hp["frame_width"])), np.uint8)

    def reset(self) -> np.ndarray:
        frame, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        for _ in range(int(self.rng.integers(0, int(self.hp["noop_max"]) + 1))):
            frame, _, term, trunc, _ = self.env.step(0)
            if term or trunc:
                frame, _ = self.env.reset()
        self.stack[:] = preprocess((frame, frame), self.hp)
        return self.stack.copy()

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        total, done, frames = 0.0, False, []
        for _ in range(int(self.hp["frame_skip"])):
            frame, reward, term, trunc, _ = self.env.step(int(action))
            frames.append(frame)
            total += float(reward)
            if term or trunc:
                done = True
                break
        last_two = (frames[-2], frames[-1]) if len(frames) > 1 else (frames[-1], frames[-1])
        self.stack = np.roll(self.stack, -1, axis=0)
        self.stack[-1] = preprocess(last_two, self.hp)
        obs = self.reset() if done else self.stack.copy()
        return obs, float(np.clip(total, -1.0, 1.0)), done


def _actor(conn: Connection, hp: dict[str, Any], seed: int) -> None:
    """An actor process: owns one environment, answers ("reset",) and ("step", action) until
    ("close",) or until the learner goes away. It takes no signal handler from the learner it was
    forked from: SIGTERM ends it, and Ctrl-C is the learner's to handle."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        env = Pong(hp, seed)
        while True:
            message = conn.recv()
            if message[0] == "close":
                break
            conn.send(("ok", env.reset() if message[0] == "reset" else env.step(message[1])))
    except EOFError:  # the learner closed its end
        pass
    except Exception as e:  # handed to the learner, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


class Actors:
    """`count` actor processes, each with its own Pong; step() acts in all of them in parallel."""

    def __init__(self, hp: Hparams, count: int, seed: int) -> None:
        context = mp.get_context("fork")  # the workload module is loaded by path, so spawn cannot import it
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for i in range(count):
            parent, child = context.Pipe()
            p = context.Process(target=_actor, args=(child, dict(hp), seed * 1000 + i), daemon=True,
                                name=f"tbdkit-a3c-actor-{i}")
            p.start()
            child.close()
            self.pipes.append(parent)
            self.processes.append(p)
        self.observation = self._gather([("reset",)] * count)[0]
        self.rng = np.random.default_rng([seed, 1])  # the policy's action draws (sample_actions)
        self.returns = np.zeros(count)              # each environment's running episode return
        self.episodes: list[float] = []             # returns of the finished episodes, in order

    def sample(self, logits: np.ndarray) -> np.ndarray:
        """Actions for the current observations from the policy's logits (N, actions), drawn here
        in NumPy so that every framework's learner draws the same actions from the same logits."""
        return sample_actions(logits, self.rng)

    def _gather(self, messages: list[tuple[Any, ...]]) -> tuple[np.ndarray, ...]:
        for pipe, message in zip(self.pipes, messages):
            pipe.send(message)
        replies = [pipe.recv() for pipe in self.pipes]
        for status, value in replies:
            if status == "error":
                self.close()
                raise RuntimeError(f"an A3C actor failed: {value}")
        values = [v for _, v in replies]
        if isinstance(values[0], np.ndarray):
            return (np.stack(values),)
        obs, rewards, dones = zip(*values)
        return np.stack(obs), np.array(rewards, np.float32), np.array(dones, bool)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Act in every environment; returns next observations (N,4,84,84) uint8, rewards, episode ends."""
        obs, rewards, dones = self._gather([("step", int(a)) for a in actions])
        self.observation = obs
        self.returns += rewards  # clipped rewards: in Pong each is one point won (+1) or lost (-1)
        for i in np.flatnonzero(dones):
            self.episodes.append(float(self.returns[i]))
            self.returns[i] = 0.0
        return obs, rewards, dones

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        for p in self.processes:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.pipes, self.processes = [], []


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of policy logits (N, A) from softmax(logits): the inverse of the
    cumulative distribution at one uniform draw per row (int64, in [0, A))."""
    z = np.asarray(logits, np.float64)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    cdf = np.cumsum(p, axis=-1)
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=-1), z.shape[1] - 1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Observations:
    """Stacked observations (N, frame_stack, H, W) uint8 with no environment behind them: the
    reference sample `tbdkit describe` counts FLOPs on, and the probe it compares outputs on."""

    features: np.ndarray
    frame_skip: int

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def work(self) -> float:
        """Observations (agent steps): the throughput unit."""
        return float(self.samples)


def reference_batch(hp: Hparams) -> Observations:
    """One observation: the sample FLOPs per sample are quoted for (one agent step, frame_skip frames)."""
    return probe_batch(hp, 1)


def probe_batch(hp: Hparams, count: int = 2, seed: int = 0) -> Observations:
    """`count` observations of seeded noise frames (the network's work does not depend on the pixels)."""
    shape = (count, int(hp["frame_stack"]), int(hp["frame_height"]), int(hp["frame_width"]))
    frames = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    return Observations(frames, int(hp["frame_skip"]))


@dataclass(frozen=True, eq=False)
class Batch:
    """One n-step rollout to play: `steps` agent steps in each of the actors' environments."""

    actors: Actors
    steps: int
    frame_skip: int

    @property
    def samples(self) -> int:
        """Agent steps (states trained on) in the rollout."""
        return len(self.actors.pipes) * self.steps

    @property
    def work(self) -> float:
        """Observations the network trains on (agent steps): the throughput unit, the paper's input samples."""
        return float(self.samples)

    @property
    def extra_work(self) -> dict[str, float]:
        """Emulator frames played (agent steps x action repeat): the secondary frames/s figure."""
        return {"frames": float(self.samples * self.frame_skip)}


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Rollouts of the live environment; `batch_size` is the number of actor processes."""
    check_source(source, hp)
    if batch_size < 1:
        raise ValueError(f"batch_size (actors) must be at least 1, got {batch_size}")
    actors = Actors(hp, batch_size, seed)
    batch = Batch(actors, int(hp["t_max"]), int(hp["frame_skip"]))
    while True:
        yield batch


# --------------------------------------------------------------------------------------------
# The converge preset: Pong's score rising


@dataclass(frozen=True, eq=False)
class ConvergenceTask:
    """Rollouts of the live game; no held-out set: quality is the score of the episodes the
    actors finish while training (`score()`), as A3C's learning curves are drawn."""

    train: Iterator[Batch]
    held_out: list[Any]
    description: str
    actors: Actors
    window: int

    def score(self) -> float | None:
        """Mean return of the last `window` finished episodes; None until that many have finished."""
        done = self.actors.episodes[-self.window:]
        return float(np.mean(done)) if len(done) == self.window else None


def convergence_task(source: str, hp: Hparams, batch_size: int, seed: int) -> ConvergenceTask:
    check_source(source, hp)
    actors = Actors(hp, batch_size, seed)
    batch = Batch(actors, int(hp["t_max"]), int(hp["frame_skip"]))
    window = int(hp["episodes_window"])
    return ConvergenceTask(itertools.repeat(batch), [], f"live {hp['env_id']} in {batch_size} actor processes: the mean "
                           f"score of the last {window} finished episodes (random play scores -20.7)",
                           actors, window)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """A3C trains on the live environment only; a dataset path is a DataError (`full`, the
    thoroughness of other readers' checks, has nothing to decode here)."""
    if source != SYNTHETIC:
        raise DataError(f"A3C reads no dataset (got {source!r}): its data is the live {hp['env_id']} environment, "
                        f"so run it without DATA / --data")
    make_env(hp).close()
    return (f"live {hp['env_id']} (ale-py) played by the actors: {hp['frame_stack']}x{hp['frame_height']}x"
            f"{hp['frame_width']} grayscale observations, action repeat {hp['frame_skip']}, no synthetic frames")
