"""The `converge` preset: train to a stated quality target on a small real task and record the
curve (the paper's Fig. 2 showed such curves), instead of measuring throughput in a window.

The workload's data.py supplies the task: `convergence_task(source, hp, batch_size, seed)` gives
endless training batches (`.train`), a fixed held-out set (`.held_out`) and what they are
(`.description`); `quality(outputs, held_out)` scores the network's inference outputs (the
workload's `forward`) on the held-out set, or, where the training itself is the measure (A3C: the
score of the episodes the actors finish), the task's own `score()` does. The preset in
workload.toml states the metric (`quality_metric`), the `target`, how often to evaluate
(`eval_every_s` of training time) and the cap (`max_train_s`). Evaluation time is not training
time: the curve's x axis is training seconds (wall time of the training steps alone), with wall
time beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbdkit.agent import events
from tbdkit.core.metric import metric, missing
from tbdkit.results import files as runfiles
from tbdkit.results.rundir import RunDir

log = logging.getLogger("tbdkit.agent")


@dataclass
class Curve:
    target: float
    metric_name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    reached_at: dict[str, Any] | None = None

    def add(self, row: dict[str, Any]) -> bool:
        """Record one evaluation (quality "" while the task cannot score yet); True once the target is reached."""
        self.rows.append(row)
        if self.reached_at is None and row["quality"] != "" and row["quality"] >= self.target:
            self.reached_at = row
        return self.reached_at is not None


def evaluate(adapter: Any, data: Any, task: Any) -> float | None:
    """The task's quality now: its own score() where training itself is the measure (A3C: the
    finished episodes' returns; None until there are enough), else data.quality over the
    network's inference outputs on the held-out set."""
    if hasattr(task, "score"):
        return task.score()
    outputs = [adapter.infer(adapter.prepare(batch)) for batch in task.held_out]
    return float(data.quality(outputs, task.held_out))


def train(
    adapter: Any,
    data: Any,
    hp: dict[str, Any],
    source: str,
    batch_size: int,
    seed: int,
    run_dir: Path,
    stop_requested: Callable[[], bool],
    unit: str = "samples/s",
) -> dict[str, Any]:
    """Train until the held-out quality reaches hp['target'] or hp['max_train_s'] of training time
    has passed; write convergence.csv and return the summary's `convergence` and `metrics`."""
    task = data.convergence_task(source, hp, batch_size, seed)
    train_batches, held_out = task.train, task.held_out
    curve = Curve(float(hp["target"]), str(hp["quality_metric"]))
    every, cap = float(hp["eval_every_s"]), float(hp["max_train_s"])
    started = time.perf_counter()
    train_s, steps, samples, work = 0.0, 0, 0, 0.0
    losses: list[float] = []

    def checkpoint() -> bool:
        quality = evaluate(adapter, data, task)
        row = {
            "wall_s": round(time.perf_counter() - started, 3),
            "train_s": round(train_s, 3),
            "step": steps,
            "samples": samples,
            "loss": round(sum(losses) / len(losses), 6) if losses else "",
            "quality": "" if quality is None else round(quality, 6),
        }
        losses.clear()
        log.info("evaluation: %s", row)
        done = curve.add(row)
        RunDir(run_dir).write_csv(
            runfiles.CONVERGENCE, curve.rows
        )  # after every point: a cut-short run keeps its curve
        events.emit("progress", elapsed_s=train_s, throughput=work / train_s if train_s else None, quality=quality)
        return done

    events.emit("phase", phase="converging", cap_s=cap)
    reached = checkpoint()  # the untrained network's quality: the curve's first point
    next_eval = every
    while not reached and train_s < cap and not stop_requested():
        batch = next(train_batches)
        inputs = adapter.prepare(batch)
        t0 = time.perf_counter()
        loss = adapter.step(inputs)
        train_s += time.perf_counter() - t0
        steps += 1
        samples += batch.samples
        work += batch.work  # in the model's throughput unit (A3C: agent steps, the observations trained on)
        losses.append(adapter.loss_value(loss))
        if train_s >= next_eval:
            reached = checkpoint()
            next_eval = train_s + every
    if not reached and curve.rows[-1]["step"] != steps:
        reached = checkpoint()  # the last steps' quality, so the curve ends where training did
    return {
        "data_source": task.description,
        **result(
            curve,
            hp,
            held_out_size=sum(b.samples for b in held_out),
            train_s=train_s,
            work=work,
            unit=unit,
            stopped=stop_requested(),
        ),
    }


def result(
    curve: Curve, hp: dict[str, Any], held_out_size: int, train_s: float, work: float, unit: str, stopped: bool
) -> dict[str, Any]:
    on = f" on {held_out_size} held-out samples" if held_out_size else ""
    method = (
        f"training seconds (the steps' wall time, evaluations excluded) until {curve.metric_name}{on}, "
        f"evaluated every {hp['eval_every_s']} s of training, first reached {curve.target}"
    )
    scored = [r["quality"] for r in curve.rows if r["quality"] != ""]
    best = max(scored) if scored else None
    if curve.reached_at is not None:
        at = curve.reached_at
        time_to_target = metric(
            at["train_s"], "s", method, steps=at["step"], samples=at["samples"], wall_s=at["wall_s"]
        )
    else:
        best_text = "no score yet" if best is None else f"best {best:.4f}"
        why = (
            "the run was interrupted"
            if stopped
            else f"not reached within max_train_s = {hp['max_train_s']} s of training ({best_text})"
        )
        time_to_target = missing("s", method, why)
    convergence = {
        "quality_metric": curve.metric_name,
        "target": curve.target,
        "reached": curve.reached_at is not None,
        "first_quality": scored[0] if scored else None,
        "best_quality": best,
        "final_quality": scored[-1] if scored else None,
        "evaluations": len(curve.rows),
        "curve": runfiles.CONVERGENCE,
        "held_out_samples": held_out_size,
    }
    metrics = {
        "time_to_target": time_to_target,
        "training_throughput": metric(
            work / train_s if train_s else None,
            unit,
            "work trained on / training seconds over the whole convergence run "
            "(no warm-up removed: not comparable with the bench's window)",
            reason=None if train_s else "no training step ran",
        ),
    }
    return {"convergence": convergence, "metrics": metrics}
