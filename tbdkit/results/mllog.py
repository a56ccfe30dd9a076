"""A run's MLPerf-style log (mllog.txt): `:::MLLOG` lines emitted with MLCommons' own logger
(mlperf_logging.mllog), written on the host after the run from summary.json, the spec and the
model's workload.toml, so the framework stacks need nothing new.

Standard keys: submission_* (benchmark, org, division, platform, status), seed, global_batch_size,
the optimizer (opt_name, opt_base_learning_rate and the other hyperparameters workload.toml gives
it), run_start / run_stop (with the run's status). tbdkit's measurements ride as custom keys
`tbdkit_<metric>` whose value is the number and whose metadata holds its unit and method (or why
it is null).
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
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
        return int(dt.datetime.fromisoformat(str(iso)).timestamp() * 1000)
    except ValueError:
        return None


def lines(summary: dict[str, Any], spec: dict[str, Any]) -> str:
    """The log's text: every line made by mlperf_logging's MLLogger."""
    from mlperf_logging.mllog import constants as k  # type: ignore[import-untyped]
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
        start_ms = _ms(summary.get("started_utc"))
        stop_ms = _ms(summary.get("finished_utc")) or start_ms
        model = catalog.get(str(summary.get("model") or spec.get("model")))
        hp = model.hp(str(spec.get("preset") or summary.get("preset")), spec.get("variant"))
        meta = {"source": "tbdkit " + __version__}

        def event(key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
            ml.event(key=key, value=value, time_ms=start_ms, metadata={**meta, **(metadata or {})})

        event(k.SUBMISSION_BENCHMARK, f"tbd_{model.name}")
        event(k.SUBMISSION_ORG, "tbdkit")
        event(k.SUBMISSION_DIVISION, "open")  # the TBD suite is not an MLPerf benchmark: open division
        event(k.SUBMISSION_STATUS, "research")
        event(k.SUBMISSION_PLATFORM, summary.get("device") or spec.get("device") or "unknown")
        event(f"{CUSTOM_PREFIX}framework", summary.get("framework") or spec.get("framework"))
        event(f"{CUSTOM_PREFIX}precision", summary.get("precision") or spec.get("precision"))
        event(f"{CUSTOM_PREFIX}preset", summary.get("preset") or spec.get("preset"))
        event(k.SEED, summary.get("seed", spec.get("seed")))
        batch = summary.get("batch_size") or spec.get("batch_size")
        world = summary.get("world_size") or 1
        event(
            k.GLOBAL_BATCH_SIZE,
            batch * world if isinstance(batch, int) else batch,
            {"per_worker_batch_size": batch, "workers": world},
        )
        for key, value in optimizer_hparams(hp).items():
            event(key, value, {"from": f"workloads/{model.name}/workload.toml"})
        ml.start(key=k.RUN_START, value=None, time_ms=start_ms, metadata=meta)
        for name, m in (summary.get("metrics") or {}).items():
            if isinstance(m, dict) and "value" in m:
                detail = {f: m[f] for f in ("unit", "method", "reason", "ci95_half_width") if m.get(f) is not None}
                ml.event(key=f"{CUSTOM_PREFIX}{name}", value=m["value"], time_ms=stop_ms, metadata={**meta, **detail})
        # A disturbed run finished its measurement (its numbers kept, flagged): MLPerf's "success" says the
        # run completed; tbdkit_status beside it says how.
        status = k.SUCCESS if summary.get("status") in MEASURED else k.ABORTED
        ml.end(
            key=k.RUN_STOP,
            value=None,
            time_ms=stop_ms,
            metadata={
                **meta,
                k.STATUS: status,
                "tbdkit_status": summary.get("status"),
                **({"error": summary["error"]} if summary.get("error") else {}),
            },
        )
    finally:
        logger.removeHandler(handler)
    return text.getvalue()


def write(run_dir: Path, summary: dict[str, Any], spec: dict[str, Any]) -> Path:
    """mllog.txt in the run folder (atomically); returns its path."""
    path = run_dir / runfiles.MLLOG
    sink.write_text(path, lines(summary, spec))
    return path
