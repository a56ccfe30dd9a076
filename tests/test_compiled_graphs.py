"""--graph standard|compiled and --precision bf16 on the host: the spec, the run id, the command lines
(Makefile's GRAPH), the compile phase's rule over a stand-in adapter that compiles as told, compile_s,
`tbdkit compare` of compiled against standard runs, and the report's compiled / standard table (the
paper's figures keep standard graphs). The frameworks' own compiled steps and bf16 steps are checked per
cell in tests/<stack>/test_every_model_<stack>.py."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_command_quoting import _make
from test_compare import make_run

from tbdkit.agent import compile_phase
from tbdkit.agent.loop import TrainingLoop
from tbdkit.analysis import compare
from tbdkit.core.errors import UserError
from tbdkit.launch.outcome import new_run_dir
from tbdkit.results.index import Index
from tbdkit.spec import run_spec


def test_graph_and_bf16_are_in_the_spec_and_a_compiled_run_id_says_so(tmp_path):
    standard = run_spec.build(model="resnet50", batch_size=4)
    assert standard.graph == "standard" and standard.precision == "fp32"
    compiled = run_spec.build(model="resnet50", batch_size=4, graph="compiled", precision="bf16")
    assert json.loads(compiled.to_json())["graph"] == "compiled"
    assert "-b4-bf16-compiled-" in new_run_dir(tmp_path, compiled).name
    assert "-b4-fp32-" in new_run_dir(tmp_path, standard).name and "standard" not in new_run_dir(tmp_path, standard).name
    with pytest.raises(UserError, match="graph"):
        run_spec.build(model="resnet50", batch_size=4, graph="xla")


def test_make_bench_and_sweep_pass_graph(tmp_path):
    """`make bench MODEL=resnet50 GRAPH=compiled` as typed (the tbdkit it calls replaced by a stub that prints
    its arguments), and GRAPH's default: standard."""
    argv = _make(tmp_path, "bench", MODEL="resnet50", GRAPH="compiled")
    assert argv[argv.index("--graph") + 1] == "compiled" and argv[argv.index("--model") + 1] == "resnet50"
    assert _make(tmp_path, "bench")[_make(tmp_path, "bench").index("--graph") + 1] == "standard"
    sweep = _make(tmp_path, "sweep", GRAPH="compiled", PRECISION="bf16")
    assert sweep[sweep.index("--graph") + 1] == "compiled" and sweep[sweep.index("--precision") + 1] == "bf16"


@dataclass
class Batch:
    shape: int
    samples: int = 2
    work: float = 2.0


class Compiler:
    """A stand-in adapter whose step 'compiles' at its first call for each shape and once more at its second
    step (an optimizer's state appearing), as torch.compile does, and sleeps `compile_s` then."""

    framework = "stand-in"
    device_label = "cpu"
    cuda_index = None
    graph = "compiled"

    def __init__(self, counts: bool = True) -> None:
        self.counts, self.compiled, self.shapes, self.steps = counts, 0, set(), 0

    def prepare(self, batch):
        return batch

    def step(self, batch):
        self.steps += 1
        if batch.shape not in self.shapes or self.steps == 2:
            self.shapes.add(batch.shape)
            self.compiled += 1
        return 1.0

    def loss_value(self, loss):
        return loss

    def compilations(self):
        return self.compiled if self.counts else None


def loop_over(adapter, shapes):
    batches = itertools.cycle([Batch(s) for s in shapes])
    return TrainingLoop(adapter, batches, run_spec.MeasurePolicy(), lambda: False, collectors=[])


@pytest.mark.parametrize("shapes, counts, iterations, reason", [
    ([1] * 8, True, 8, "nothing new compiled"),  # one pass over the pool, then quiet
    ([1, 2, 3], True, 4, "nothing new compiled"),  # each shape compiles once, then a quiet step
    ([1], True, 3, "nothing new compiled"),  # at least two; the second compiled again, so one more
    ([1, 2], False, 2, "every batch of the pool stepped once"),  # a framework that does not count
])
def test_the_compile_phase_steps_until_nothing_new_is_compiled(shapes, counts, iterations, reason):
    adapter = Compiler(counts)
    loop = loop_over(adapter, shapes)
    phase = compile_phase.run(loop, adapter, len(shapes))
    assert (phase["iterations"], phase["end_reason"]) == (iterations, reason), phase
    assert [i.phase for i in loop.result.iterations] == ["compile"] * iterations
    compilations = adapter.compiled
    loop.warm_up()  # warm-up starts afresh after it and compiles nothing
    assert adapter.compiled == compilations


def test_compile_s_is_the_phase_less_its_steady_work():
    phase = {"seconds": 30.0, "work": 40.0, "iterations": 8}
    got = compile_phase.compile_seconds(phase, 4.0, "images/s")
    assert got["value"] == pytest.approx(20.0) and got["unit"] == "s" and got["phase_s"] == 30.0
    assert "window's throughput" in got["method"]
    standard = compile_phase.compile_seconds(None, 4.0, "images/s")
    assert standard["value"] is None and "standard graph" in standard["reason"]


def test_compare_takes_compiled_against_standard_and_an_old_run_is_standard(tmp_path):
    standard = compare.load(make_run(tmp_path, "standard", 10.0))  # no `graph` recorded: before compiled runs
    compiled = compare.load(make_run(tmp_path, "compiled", 14.0, seed=1, graph="compiled"))
    result = compare.compare(compiled, standard)
    assert result.verdict == compare.FASTER and ("graph", "compiled", "standard") in result.differences
    assert "compiled (compiled)" in compiled.label
    bf16 = compare.load(make_run(tmp_path, "bf16", 14.0, seed=2, graph="compiled", precision="bf16"))
    with pytest.raises(UserError, match="precision"):
        compare.compare(bf16, standard)


def compiled_runs(results: Path) -> None:
    """Three standard and three compiled runs of one spec, indexed: what the report's table compares."""
    record = {"graph": "compiled", "compiler": "torch.compile", "graph_breaks": 6, "recompilations": 1,
              "dynamic": True, "compilations": 11}
    for i in range(3):
        make_run(results, f"s{i}", 10.0 + 0.1 * i, seed=i)
        make_run(results, f"c{i}", 13.0 + 0.1 * i, seed=10 + i, graph="compiled", compile=record)
        summary = json.loads((results / f"c{i}" / "summary.json").read_text())
        summary["metrics"]["compile_s"] = {"value": 60.0 + i, "unit": "s", "method": "fixture"}
        (results / f"c{i}" / "summary.json").write_text(json.dumps(summary))
    index = Index(results)
    for run in sorted(results.iterdir()):
        if run.is_dir():
            index.add(run)


def test_the_report_tables_compiled_against_standard_and_keeps_the_paper_figures_standard(tmp_path):
    from tbdkit.report import compiled, runs

    results = tmp_path / "results"
    compiled_runs(results)
    loaded = runs.load(results)
    assert len(loaded) == 6 and len(compiled.paper_runs(loaded)) == 3
    assert len(compiled.paper_runs(loaded, with_compiled=True)) == 6
    [row] = compiled.rows(loaded)
    assert row[0] == "deepspeech2 / pytorch" and row[6] == "61 s"
    assert row[5].startswith("faster (between runs, 3+3 runs)")
    ratio, interval = row[4].split(" ", 1)
    low, high = (float(x) for x in interval.strip("()").split("-"))
    assert low < float(ratio) < high and 1.2 < float(ratio) < 1.45
    assert "6 graph break(s), 1 recompilation(s), dynamic shapes" in row[7]
    assert {r.series.graph for r in loaded} == {"standard", "compiled"}


def test_report_md_holds_the_table_and_says_the_figures_left_the_compiled_runs_out(tmp_path):
    from tbdkit.report import build_report

    results = tmp_path / "results"
    compiled_runs(results)
    build_report(results, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    table = text.split("## Compiled graphs against standard ones", 1)[1]
    assert "| deepspeech2 / pytorch |" in table and "faster (between runs, 3+3 runs)" in table
    assert "3 compiled run(s) are left out of the paper's figures" in table
    build_report(results, tmp_path / "all", with_compiled=True)
    assert "left out of the paper's figures" not in (tmp_path / "all" / "report.md").read_text()


def test_the_report_without_compiled_runs_says_how_to_get_the_table(tmp_path):
    from tbdkit.report import compiled, runs

    results = tmp_path / "results"
    make_run(results, "s0", 10.0)
    Index(results).add(results / "s0")
    loaded = runs.load(results)
    context = compiled.context(loaded, loaded)
    assert context["compiled_rows"] == [] and "--graph compiled" in context["compiled_missing"]
    assert context["compiled_left_out"] == ""


def test_a_sweep_runs_its_points_compiled_and_a_standard_sweep_keeps_its_id(tmp_path):
    from tbdkit.spec.sweep_spec import parse

    fields = {"model": "minigo", "frameworks": ["pytorch"], "batches": [2], "results": str(tmp_path)}
    standard, compiled = parse(fields), parse({**fields, "graph": "compiled"})
    assert compiled.run_spec("pytorch", "fp32", 2).graph == "compiled"
    assert standard.run_spec("pytorch", "fp32", 2).graph == "standard"
    assert standard.sweep_id() != compiled.sweep_id()
    # a standard sweep's id is the one it had before graphs existed (the grid's fields then), so its state resumes
    import hashlib

    before = standard.model_dump(mode="json", exclude={"results", "repeat", "cv_limit", "retry_disturbed", "graph",
                                                       "cpus", "pin"})
    digest = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:10]
    assert standard.sweep_id() == f"minigo-smoke-{digest}"


def test_compile_s_says_its_cache_and_shared_is_recorded_in_the_spec():
    """Each compiled run compiles from an empty cache of its own (compile_s: the cold cost); --compile-cache
    shared keeps PyTorch's caches across runs (the warm cost), recorded in spec.json and in compile_s."""
    phase = {"seconds": 30.0, "work": 40.0, "iterations": 8}
    assert "cold cost" in compile_phase.compile_seconds(phase, 4.0, "images/s")["cache"]
    warm = compile_phase.compile_seconds({**phase, "cache": compile_phase.CACHE["shared"]}, 4.0, "images/s")
    assert "warm cost" in warm["cache"]
    spec = run_spec.build(model="resnet50", framework="pytorch", batch_size=2, graph="compiled", compile_cache="shared")
    assert spec.model_dump()["compile_cache"] == "shared"
    assert run_spec.build(model="resnet50", framework="pytorch", batch_size=2).compile_cache == "private"
    for wrong in ({"graph": "standard"}, {"graph": "compiled", "framework": "tensorflow"}):
        with pytest.raises(UserError, match="compile_cache: shared"):
            run_spec.build(**{"model": "resnet50", "framework": "pytorch", "batch_size": 2, "compile_cache": "shared",
                           **wrong})
