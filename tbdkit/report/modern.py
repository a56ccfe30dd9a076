"""The report's section on the modern workloads (Llama, ViT, DiT; not the TBD paper's models): per run, throughput
and model TFLOP/s per GPU, MFU against the peak of the math mode that ran (the other mode's beside it for a mixed
one), the memory breakdown (each rank's shards under FSDP2); what --graph compiled and --precision fp8 bought
where both sides were measured; and the published numbers (modern-references.toml, each with its source) beside
the kit's runs of the same model, setting, graph and precision."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from tbdkit.report.runs import Run, byte_count, throughput
from tbdkit.report.tables import fmt
from tbdkit.results import readers

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

REFERENCES = Path(__file__).with_name("modern-references.toml")  # published numbers, with their sources
HEADER = ["run", "GPUs", "graph", "precision", "throughput per GPU", "model TFLOP/s per GPU", "MFU", "memory"]
COMPARISON_HEADER = ["model / framework / setting", "comparison", "ours", "published"]
REFERENCE_HEADER = ["published", "on", "per GPU", "ours (same setting)", "memory GiB", "setting", "source"]
MISSING = "No run of a modern workload (llama, vit, dit) in these results."
GIB, MIB = 2**30, 2**20


def references() -> dict[str, Any]:
    return tomllib.loads(REFERENCES.read_text())


def variant(r: Run) -> str:
    return str(r.summary.get("variant") or r.spec.get("variant") or "default")


def per_gpu(r: Run) -> float | None:
    """The run's throughput per worker (its own estimate where recorded, else the job's over its workers)."""
    own = r.metric_entry("per_worker_throughput").get("value")
    if isinstance(own, (int, float)):
        return float(own)
    value = throughput(r)
    return None if value is None else value / r.world_size


def tflops_per_gpu(r: Run) -> float | None:
    """Model FLOPs per unit of work (the kit's counter) x work per second per GPU, in TFLOP/s."""
    per_work, value = readers.finite(r.metric_entry("model_flops_per_sample").get("flops_per_work")), per_gpu(r)
    if per_work is None or per_work <= 0 or value is None:  # no model does no work: a forged or damaged count
        return None
    return per_work * value / 1e12


def mfu_cell(r: Run) -> str:
    entry = r.metric_entry("mfu")
    value = readers.non_negative(entry.get("value"))
    if value is None:
        why = entry.get("reason") or ("not measured" if entry.get("value") is None else "not a share of a peak")
        return f"— ({why})"
    other = readers.non_negative(entry.get("mfu_other"))  # beside the schema's fields: a forged file's may be anything
    beside = f" ({other:.1f} % of the other mode's peak)" if other is not None else ""
    return f"{value:.1f} %{beside}"


SHARD_PARTS = (("weights", "weights"), ("weight_gradients", "gradients"), ("optimizer_state", "optimizer state"))


def _shard_cell(shard: Any) -> str:
    """One FSDP2 rank's weights, gradients and optimizer state in MiB ('?' where the summary holds no count)."""
    counts = [byte_count(shard.get(key)) if isinstance(shard, dict) else None for key, _ in SHARD_PARTS]
    return (
        ", ".join(f"{name} {'?' if b is None else f'{b / MIB:,.2f}'}" for (_, name), b in zip(SHARD_PARTS, counts))
        + " MiB"
    )


def memory_cell(r: Run) -> str:
    """Each rank's weights, gradients and optimizer state under FSDP2, else the run's memory.json breakdown."""
    shard_memory = r.summary.get("shard_memory")
    shards = shard_memory.get("ranks") if isinstance(shard_memory, dict) else None
    if isinstance(shards, list) and shards:
        return "; ".join(f"rank {i}: {_shard_cell(s)}" for i, s in enumerate(shards))
    if not r.memory:
        return "— (no memory.json: a multi-worker run, or none taken)"
    parts = [(c, r.memory_bytes(c)) for c in ("weights", "weight_gradients", "feature_maps")]
    peak = r.peak_memory_bytes
    cells = [f"{c.replace('_', ' ')} {b / MIB:,.1f}" for c, b in parts if b is not None]
    return ", ".join(cells + ([f"peak {peak / MIB:,.1f}"] if peak is not None else [])) + " MiB"


def modern_runs(runs: list[Run]) -> list[Run]:
    models = set(references()["section"]["models"])
    return [r for r in runs if r.model in models]


def rows(runs: list[Run]) -> list[list[str]]:
    out = []
    for r in modern_runs(runs):
        value, unit = per_gpu(r), r.unit
        out.append(
            [
                f"{r.model}/{r.framework} {variant(r)} b{r.batch_size}",
                f"{r.world_size} x {r.device_name}",
                r.graph,
                r.precision,
                f"{fmt(value)} {unit}" if value is not None else "—",
                fmt(tflops_per_gpu(r)),
                mfu_cell(r),
                memory_cell(r),
            ]
        )
    return out


def _setting(r: Run) -> tuple[Any, ...]:
    return (r.model, r.framework, variant(r), r.batch_size, r.device_name, r.world_size)


def _mean(runs: list[Run], graph: str, precision: str) -> float | None:
    values = [v for r in runs if r.graph == graph and r.precision == precision and (v := per_gpu(r)) is not None]
    return fmean(values) if values else None


def _published(model: str, var: str, graph: str, precision: str) -> float | None:
    for ref in references()["reference"]:
        if (ref["model"], ref["variant"], ref["graph"], ref["precision"]) == (model, var, graph, precision):
            return float(ref["tokens_per_s_per_gpu"])
    return None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "—"


PAIRS = (
    ("compiled / standard (bf16)", ("compiled", "bf16"), ("standard", "bf16")),
    ("fp8 / bf16 (compiled)", ("compiled", "fp8"), ("compiled", "bf16")),
    ("fp8 / bf16 (standard)", ("standard", "fp8"), ("standard", "bf16")),
)


def comparison_rows(runs: list[Run]) -> list[list[str]]:
    """What compiling and fp8 bought, for each setting measured on both sides (mean per-GPU throughput), with the
    published ratio of the same pair where there is one."""
    groups: dict[tuple[Any, ...], list[Run]] = {}
    for r in modern_runs(runs):
        groups.setdefault(_setting(r), []).append(r)
    out = []
    for (model, fw, var, batch, device, world), group in groups.items():
        for label, top, bottom in PAIRS:
            ours = _ratio(_mean(group, *top), _mean(group, *bottom))
            if ours != "—":
                published = _ratio(_published(model, var, *top), _published(model, var, *bottom))
                out.append([f"{model}/{fw} {var} b{batch}, {world} x {device}", label, ours, published])
    return out


def reference_rows(runs: list[Run]) -> list[list[str]]:
    out = []
    for ref in references()["reference"]:
        mine = [
            r
            for r in modern_runs(runs)
            if (r.model, variant(r), r.graph, r.precision)
            == (ref["model"], ref["variant"], ref["graph"], ref["precision"])
            and r.is_gpu
        ]
        values = [v for r in mine if (v := per_gpu(r)) is not None]
        ours = (
            f"{fmean(values):,.0f} ({', '.join(sorted({r.device_name for r in mine}))})"
            if values
            else "— (no such GPU run here)"
        )
        out.append(
            [
                ref["label"],
                f"{ref['gpus']} x {ref['gpu']}",
                f"{ref['tokens_per_s_per_gpu']:,} tokens/s",
                ours,
                fmt(float(ref["memory_gib"])),
                ref["setting"],
                ref["source"],
            ]
        )
    return out


def context(runs: list[Run]) -> dict[str, Any]:
    data = references()
    return {
        "modern_header": HEADER,
        "modern_rows": rows(runs),
        "modern_missing": MISSING,
        "modern_comparison_header": COMPARISON_HEADER,
        "modern_comparison_rows": comparison_rows(runs),
        "modern_reference_header": REFERENCE_HEADER,
        "modern_reference_rows": reference_rows(runs),
        "modern_differs": [f"{model}: {text}" for model, text in data.get("differs", {}).items()],
    }
