"""A run's MLPerf-style log (mllog.txt): `:::MLLOG` lines emitted with MLCommons' own logger
(mlperf_logging.mllog), written on the host after the run from summary.json, iterations.csv, the spec
and the model's workload.toml, so the framework stacks need nothing new.

Standard keys: init_start (the agent's start), the submission_* keys, seed, global_batch_size, the
optimizer (opt_name, opt_base_learning_rate and the other hyperparameters workload.toml gives it), the
precision and parallelism a 6.1 log discloses, init_stop and run_start (the training loop's start),
block_start / block_stop around the sample window with its samples_count, train_samples, run_stop (the
loop's end, with the run's status); times in milliseconds on the wall clock. tbdkit's measurements ride
as custom keys `tbdkit_<metric>` whose value is the number and whose metadata holds its unit and method
(or why it is null).

`python -m tbdkit.results.mllog results/<run>/mllog.txt` runs MLCommons' compliance checker over a log
(`compliance`) and says which of its failures only an MLPerf submission can avoid (docs/artifact.md).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import logging
import math
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tbdkit import __version__
from tbdkit.core.paths import KIT_ROOT
from tbdkit.results import files as runfiles
from tbdkit.results import sink
from tbdkit.results.summary import MEASURED
from tbdkit.spec import catalog

# workload.toml's optimizer hyperparameters -> MLPerf's key (others: opt_<name>)
OPTIMIZER_KEYS = {
    "optimizer": "opt_name",
    "learning_rate": "opt_base_learning_rate",
    "weight_decay": "opt_weight_decay",
    "adam_beta1": "opt_adam_beta_1",
    "adam_beta2": "opt_adam_beta_2",
    "adam_epsilon": "opt_adam_epsilon",
    "warmup_steps": "opt_learning_rate_warmup_steps",
    "clip_gradient_value": "opt_gradient_clip_value",
}
OPTIMIZER_PREFIXES = ("adam_", "rmsprop_", "lr_", "sgd_")
OPTIMIZER_NAMES = ("momentum", "decay_scheme")
CUSTOM_PREFIX = "tbdkit_"


def optimizer_hparams(hp: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's hyperparameters of a preset, under MLPerf's key names."""
    out: dict[str, Any] = {}
    for name, value in hp.items():
        if name in OPTIMIZER_KEYS:
            out[OPTIMIZER_KEYS[name]] = value
        elif name in OPTIMIZER_NAMES or name.startswith(OPTIMIZER_PREFIXES):
            out[f"opt_{name}"] = value
    return out


def _ms(iso: Any) -> int | None:
    try:
        return round(dt.datetime.fromisoformat(str(iso)).timestamp() * 1000)
    except ValueError:
        return None


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_iterations(run_dir: Path) -> list[dict[str, str]]:
    """iterations.csv's rows as text ([] when the run wrote none)."""
    path = run_dir / runfiles.ITERATIONS
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def lowest_precision(summary: dict[str, Any], spec: dict[str, Any]) -> tuple[str, str]:
    """The lowest precision of the run's matrix multiplications in MLPerf's words, and where it was read."""
    mode = summary.get("math_mode") or {}
    for key in ("autocast_dtype", "amp_dtype", "keras_dtype_policy"):
        value = str(mode.get(key) or "")
        if "bfloat16" in value:
            return "bfloat16", f"summary.json's math_mode.{key}"
        if "float16" in value:
            return "fp16", f"summary.json's math_mode.{key}"
    gpu = str(summary.get("device") or spec.get("device") or "").startswith("cuda")
    if mode:
        tf32 = mode.get("tf32_matmul") is True or mode.get("mode") == "tf32"
        return ("tf32" if tf32 and gpu else "fp32"), "summary.json's math_mode (TF32 exists on GPUs only)"
    asked = str(spec.get("precision") or summary.get("precision") or "fp32")
    return {"amp": "fp16", "tf32": "tf32" if gpu else "fp32"}.get(asked, "fp32"), "the spec's precision"


class Timeline:
    """The run's moments in milliseconds since the epoch: the agent's start, the training loop's start
    (iterations.csv's start_s = 0), the sample window's first and last iteration, the loop's end;
    None where the run did not get there or its summary did not record it."""

    def __init__(self, summary: dict[str, Any], rows: Iterable[dict[str, Any]]) -> None:
        self.start = _ms(summary.get("started_utc"))
        self.loop = _ms(summary.get("loop_started_utc"))
        self.finished = _ms(summary.get("finished_utc")) or self.start
        self.rows = [r for r in rows if _number(r.get("start_s")) is not None and _number(r.get("seconds")) is not None]
        window = summary.get("window") or {}
        first, last = window.get("first_iteration"), window.get("last_iteration")
        self.window = [
            r
            for r in self.rows
            if isinstance(first, int)
            and isinstance(last, int)
            and first <= int(_number(r.get("iteration")) or -1) <= last
        ]

    def at(self, seconds: float) -> int | None:
        """A time on the loop's clock (seconds since it started) on the wall clock."""
        return None if self.loop is None else self.loop + round(seconds * 1000)

    @staticmethod
    def end_s(row: dict[str, Any]) -> float:
        return (_number(row.get("start_s")) or 0.0) + (_number(row.get("seconds")) or 0.0)

    def stop(self) -> int | None:
        """When training stopped: the last iteration's end, else when the agent finished."""
        return (self.at(self.end_s(self.rows[-1])) if self.rows else None) or self.finished


def _compile_metric(summary: dict[str, Any]) -> dict[str, Any]:
    """compile_s (the seconds the compiler added) for the graph event's metadata, where the run measured it."""
    m = (summary.get("metrics") or {}).get("compile_s")
    return {"compile_s": m["value"]} if isinstance(m, dict) and m.get("value") is not None else {}


def _samples(rows: Iterable[dict[str, Any]]) -> int:
    return int(sum(_number(r.get("samples")) or 0.0 for r in rows))


def recorded_hparams(summary: dict[str, Any], spec: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """The run's model, the hyperparameters it trained with, and where they were read: the run's own record
    (spec.json's workload.hparams, written when it was launched); a run recorded before the kit wrote one
    reads its model's workload.toml as it is now."""
    name = str(summary.get("model") or spec.get("model"))
    record = spec.get("workload")
    if isinstance(record, dict) and isinstance(record.get("hparams"), dict):
        return name, record["hparams"], f"{runfiles.SPEC} workload.hparams (resolved when the run was launched)"
    model = catalog.get(name)
    hp = model.hp(str(spec.get("preset") or summary.get("preset")), spec.get("variant"))
    return name, hp, f"{model.folder.name}/workload.toml (the run recorded no hyperparameters)"


def lines(summary: dict[str, Any], spec: dict[str, Any], rows: Iterable[dict[str, Any]] = ()) -> str:
    """The log's text, every line made by mlperf_logging's MLLogger; `rows`: iterations.csv's."""
    from mlperf_logging.mllog.mllog import MLLogger  # type: ignore[import-untyped]

    text = io.StringIO()
    logger = logging.getLogger(f"tbdkit.results.mllog.{id(text)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(text)
    logger.addHandler(handler)
    try:
        # root_dir: call sites are named inside the kit (tbdkit/results/mllog.py), never by this machine's path
        ml = MLLogger(logger=logger, default_stack_offset=1, root_dir=re.escape(str(KIT_ROOT)))
        log = _Log(ml, Timeline(summary, rows), summary, spec)
        log.submission()
        log.hyperparameters()
        log.loop()
        log.stop()
    finally:
        logger.removeHandler(handler)
    return text.getvalue()


class _Log:
    """One run's log as MLLogger writes it: submission, hyperparameters, the loop and its window, the stop."""

    def __init__(self, ml: Any, when: Timeline, summary: dict[str, Any], spec: dict[str, Any]) -> None:
        from mlperf_logging.mllog import constants  # type: ignore[import-untyped]

        self.ml, self.k, self.when, self.summary, self.spec = ml, constants, when, summary, spec
        self.meta = {"source": "tbdkit " + __version__}
        self.world = summary.get("world_size") or 1
        self.processes = max(1, self.world // (summary.get("replicas_per_process") or 1))
        self.compiling = [r for r in when.rows if r.get("phase") == "compile"]

    def event(self, key: str, value: Any, metadata: dict[str, Any] | None = None, **at: int | None) -> None:
        """One event at the agent's start, or at `time_ms` (None: MLLogger's clock, as it reads None)."""
        time_ms = at.get("time_ms", self.when.start)
        self.ml.event(key=key, value=value, time_ms=time_ms, metadata={**self.meta, **(metadata or {})})

    def field(self, name: str) -> Any:
        """The summary's value of `name`, else the spec's."""
        return self.summary.get(name) or self.spec.get(name)

    def submission(self) -> None:
        """The agent's start, then what ran: benchmark, organisation, platform, framework, precision, graph."""
        k, summary = self.k, self.summary
        name, _, _ = recorded_hparams(summary, self.spec)
        started = {**self.meta, "what": "the agent started"}
        self.ml.start(key=k.INIT_START, value=None, time_ms=self.when.start, metadata=started)
        self.event(k.SUBMISSION_BENCHMARK, f"tbd_{name}")
        self.event(k.SUBMISSION_ORG, "tbdkit")
        self.event(k.SUBMISSION_DIVISION, "open")  # the TBD suite is not an MLPerf benchmark: open division
        self.event(k.SUBMISSION_STATUS, "research")
        self.event(k.SUBMISSION_PLATFORM, self.field("device") or "unknown")
        self.event(f"{CUSTOM_PREFIX}framework", self.field("framework"))
        self.event(f"{CUSTOM_PREFIX}precision", self.field("precision"))
        self.event(f"{CUSTOM_PREFIX}preset", self.field("preset"))
        compiled = (summary.get("compile") or {}).get("graph") or self.spec.get("graph") or "standard"
        phase = (
            f"; its compile phase (iterations {self.compiling[0].get('iteration')}-"
            f"{self.compiling[-1].get('iteration')}) is counted in init, before run_start, as MLPerf counts compilation"
            if self.compiling
            else ""
        )
        what = "how the training step ran: standard (eager) or compiled" + phase
        self.event(f"{CUSTOM_PREFIX}graph", compiled, {"what": what, **_compile_metric(summary)})

    def hyperparameters(self) -> None:
        """Seed, batch sizes, parallelism, numerical precisions, the config file and the optimizer's settings."""
        k, summary, spec, world = self.k, self.summary, self.spec, self.world
        _, hp, hp_from = recorded_hparams(summary, spec)
        self.event(k.SEED, summary.get("seed", spec.get("seed")))
        batch = summary.get("batch_size") or spec.get("batch_size")
        per_worker = {"per_worker_batch_size": batch, "workers": world}
        self.event(k.GLOBAL_BATCH_SIZE, batch * world if isinstance(batch, int) else batch, per_worker)
        self.event("micro_batch_size", batch, {"what": "each replica's batch (no gradient accumulation)"})
        for key in ("tensor_parallelism", "pipeline_parallelism", "context_parallelism", "expert_parallelism"):
            self.event(key, 1, {"what": "tbdkit trains data-parallel only"})
        precision, source = lowest_precision(summary, spec)
        self.event("lowest_numerical_precision_in_linear", precision, {"from": source})
        attention = "the precision of the model's matrix multiplications, attention's among them"
        self.event("lowest_numerical_precision_in_attn", precision, {"from": source, "what": attention})
        exchanged = "the gradients' precision: the kit's data-parallel jobs exchange fp32 gradients" + (
            "" if world > 1 else "; a run of one replica exchanges none"
        )
        self.event("lowest_numerical_precision_in_comm", "fp32", {"what": exchanged})
        self.event("config_filename", runfiles.SPEC, {"what": "the run's spec in its run folder"})
        for key, value in optimizer_hparams(hp).items():
            self.event(key, value, {"from": hp_from})

    def loop(self) -> None:
        """Init's end and the run's start (after a compile phase, as MLPerf counts compilation), the window."""
        k, when, start_ms, compiling = self.k, self.when, self.when.start, self.compiling
        loop_ms = when.loop
        if loop_ms is None and when.rows:  # a summary written before the loop's start was recorded
            loop_ms, note = start_ms, {"note": "the training loop's start was not recorded: the agent's start"}
        elif compiling and when.loop is not None:  # MLPerf counts compilation as init: run_start after the phase
            loop_ms = when.at(when.end_s(compiling[-1]))
            note = {"what": "the compile phase ended; the training loop's warm-up started"}
        else:
            note = {"what": "the training loop started"}
        if loop_ms is not None:
            self.ml.end(key=k.INIT_STOP, value=None, time_ms=loop_ms, metadata={**self.meta, **note})
        self.ml.start(key=k.RUN_START, value=None, time_ms=loop_ms or start_ms, metadata={**self.meta, **note})
        if when.window and when.loop is not None:
            self.window()

    def window(self) -> None:
        """The sample window as one block, its samples counted over every worker."""
        k, when, processes = self.k, self.when, self.processes
        first, last = when.window[0], when.window[-1]
        before = _samples(when.rows[: next(i for i, r in enumerate(when.rows) if r is first)])
        self.ml.start(
            key=k.BLOCK_START,
            value=None,
            time_ms=when.at(_number(first.get("start_s")) or 0.0),
            metadata={
                **self.meta,
                "samples_count": before * processes,
                "what": "the sample window starts",
                "first_iteration": int(_number(first.get("iteration")) or 0),
            },
        )
        self.ml.end(
            key=k.BLOCK_STOP,
            value=None,
            time_ms=when.at(when.end_s(last)),
            metadata={
                **self.meta,
                "samples_count": (before + _samples(when.window)) * processes,
                "what": "the sample window ends",
                "last_iteration": int(_number(last.get("iteration")) or 0),
            },
        )

    def stop(self) -> None:
        """The samples trained, every metric of the summary, and the run's stop with its status."""
        k, when, summary, meta = self.k, self.when, self.summary, self.meta
        stop_ms = when.stop()
        if when.rows:
            what = (
                "samples this run trained (warm-up, sample window, analysis; every worker); an MLPerf "
                "log gives its training set's size here"
            )
            self.event(k.TRAIN_SAMPLES, _samples(when.rows) * self.processes, {"what": what}, time_ms=stop_ms)
        for name, m in (summary.get("metrics") or {}).items():
            if isinstance(m, dict) and "value" in m:
                detail = {f: m[f] for f in ("unit", "method", "reason", "ci95_half_width") if m.get(f) is not None}
                self.ml.event(
                    key=f"{CUSTOM_PREFIX}{name}", value=m["value"], time_ms=stop_ms, metadata={**meta, **detail}
                )
        # A disturbed run finished its measurement (its numbers kept, flagged): MLPerf's "success" says the
        # run completed; tbdkit_status beside it says how.
        status = k.SUCCESS if summary.get("status") in MEASURED else k.ABORTED
        error = {"error": summary["error"]} if summary.get("error") else {}
        ended = {**meta, k.STATUS: status, "tbdkit_status": summary.get("status"), **error}
        self.ml.end(key=k.RUN_STOP, value=None, time_ms=stop_ms, metadata=ended)


def write(run_dir: Path, summary: dict[str, Any], spec: dict[str, Any]) -> Path:
    """mllog.txt in the run folder (atomically); returns its path."""
    path = run_dir / runfiles.MLLOG
    sink.write_text(path, lines(summary, spec, read_iterations(run_dir)))
    return path


# ---------------------------------------------------------------------------------------------------
# MLCommons' compliance checker over a tbdkit log

RULESET = "6.1.0"  # the newest training ruleset of the pinned mlperf-logging (its checker's default)

# The checker's rules that a tbdkit log fails by what it is, not by a missing line: why each cannot be met.
SUBMISSION_ONLY = {
    "submission_benchmark": "its value must name an MLPerf Training benchmark; TBD's models are not MLPerf "
    "benchmarks, so the log names tbd_<model> (MLPerf has no rules of its own for it)",
    "eval_accuracy": "MLPerf times training to a quality target, checked by evaluations on held-out data; a "
    "tbdkit run measures throughput over a sample window and evaluates nothing",
    "eval_samples": "the size of the evaluation set, which a run that evaluates nothing does not have",
    "cache_clear": "an MLPerf submission's launch script drops the host's caches before each timed run, which "
    "needs root on the host; tbdkit runs unprivileged (its warm-up, outside the sample window, warms the caches "
    "instead)",
}


def compliance(path: Path, ruleset: str = RULESET) -> list[tuple[str | None, str]]:
    """MLCommons' compliance checker (mlperf_logging.compliance_checker: its rule engine and its training
    rule files) over a log: each message it gives, as (the key it is about, or None; the message).

    The checker's own command (`python -m mlperf_logging.compliance_checker`) stops with a traceback on a
    benchmark it has no rule file for, as every tbd_<model> is: here such a benchmark's rules are empty,
    and every other rule file is the checker's own."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser  # type: ignore[import-untyped]

    checker = mlp_compliance.make_checker("training", ruleset, False, False)
    loglines, errors = mlp_parser.parse_file(str(path), ruleset=ruleset)
    if errors:
        checker.put_message(f"{len(errors)} line(s) the parser rejects: {errors[0][1]}")
    rules = Path(mlp_compliance.__file__).parent
    queue = mlp_compliance.enqueued_configs  # the checker's queue, which the rule files' POST code extends
    queue.clear()
    queue.append(f"training_{ruleset}/common.yaml")
    while queue:
        config = rules / queue.pop(0)
        if config.is_file():
            checker.configured_checks(loglines, str(config))
    keyed: list[tuple[str | None, str]] = [(key, msg) for key, msg in checker.overwritable.items()]
    return keyed + [(None, msg) for msg in checker.not_overwritable]


def _keys(message: str) -> set[str]:
    """The keys an unkeyed message is about ("Required AT_LEAST_ONE occurrence of 'a' or 'b'")."""
    return set(re.findall(r"'([a-z_0-9]+)'", message.splitlines()[0]))


def verdict(messages: list[tuple[str | None, str]]) -> tuple[list[str], list[str]]:
    """(the keys of the failed rules only a submission can meet, the other failures' messages)."""
    expected, other = [], []
    for key, message in messages:
        keys = {key} if key else _keys(message)
        if keys and keys <= set(SUBMISSION_ONLY):
            expected += sorted(keys)
        else:
            other.append(message)
    return sorted(set(expected)), other


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tbdkit.results.mllog",
        description="Check a run's mllog.txt with MLCommons' compliance checker (its training rules).",
    )
    parser.add_argument("log", type=Path, help="a run's mllog.txt, e.g. results/<run>/mllog.txt")
    parser.add_argument("--ruleset", default=RULESET, help=f"the training ruleset (default {RULESET})")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        print(f"error: {args.log} is not a file: give a run's mllog.txt", file=sys.stderr)
        return 2
    expected, other = verdict(compliance(args.log, args.ruleset))
    for key in expected:
        print(f"fails {key}, a rule only an MLPerf submission meets: {SUBMISSION_ONLY[key]}")
    for message in other:
        print(f"FAILED: {message}")
    print(
        f"{args.log}: {'fails rules a tbdkit log should meet' if other else 'passes'} "
        f"(training {args.ruleset}; every rule but the {len(expected)} above)"
    )
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())
