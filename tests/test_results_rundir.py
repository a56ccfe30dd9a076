"""RunDir: one run folder's files by role, read and written through the results package; and the one
summary builder the agent and the launchers share."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from tbdkit.results import files
from tbdkit.results import summary as summaries
from tbdkit.results.rundir import RunDir
from tbdkit.spec.run_spec import RunSpec

ROLES = {"spec": files.SPEC, "env": files.ENV, "iterations": files.ITERATIONS, "samples": files.SAMPLES,
         "summary": files.SUMMARY, "memory": files.MEMORY, "kernels": files.KERNELS,
         "kernel_launches": files.KERNEL_LAUNCHES, "log": files.LOG, "convergence": files.CONVERGENCE,
         "container_spec": files.CONTAINER_SPEC, "container_state": files.CONTAINER_STATE,
         "container_log": files.CONTAINER_LOG, "ncu_raw": files.NCU_RAW,
         "trace": files.TRACE, "profiler_trace": files.PROFILER_TRACE, "mllog": files.MLLOG}


def test_every_run_file_has_its_role_and_every_path_is_a_run_file(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run-1")
    assert set(ROLES.values()) == files.RUN_FILES  # a new run file gets a role here too
    for role, name in ROLES.items():
        path = getattr(rd, role)
        assert path == tmp_path / "run-1" / name and files.is_run_file(PurePosixPath(path.relative_to(rd.path)))
    assert rd.name == "run-1" and RunDir(str(rd.path)) == rd


def test_a_jobs_workers_are_run_dirs_under_workers(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    assert rd.rank(0) == rd
    assert rd.rank(3).path == tmp_path / files.WORKERS / "rank3"
    assert files.is_run_file(PurePosixPath(rd.rank(3).summary.relative_to(tmp_path)))
    assert files.is_run_file(PurePosixPath(rd.node_log(1).relative_to(tmp_path)))
    assert files.is_worker_dir(PurePosixPath(rd.rank(3).path.relative_to(tmp_path)))
    rd.rank(2).path.mkdir(parents=True)
    rd.rank(2).log.write_text("two\n")
    rd.node_log(1).write_text("node one\n")
    assert rd.worker_logs() == sorted([rd.log, rd.node_log(1), rd.rank(2).log])  # log.txt listed even if absent


def test_writes_land_whole_and_read_back(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    assert rd.write_json(files.ENV, {"cpu": {"model": "x"}}) == rd.env
    assert rd.read_json(files.ENV) == {"cpu": {"model": "x"}}
    rd.write_csv(files.SAMPLES, [{"t": 1}, {"t": 2, "u": 3}])
    assert rd.samples.read_text() == "t,u\n1,\n2,3\n"
    assert rd.write_text(files.NCU_RAW, "raw") == rd.ncu_raw and rd.ncu_raw.read_text() == "raw"
    assert sorted(p.name for p in rd.path.iterdir()) == sorted([files.ENV, files.SAMPLES, files.NCU_RAW])  # no temp left
    assert rd.write_json_or_fallback(files.SUMMARY, {"a": 1}) == rd.summary
    assert rd.fallback(files.SUMMARY).name == files.SUMMARY and rd.path.name in rd.fallback(files.SUMMARY).parts


def test_read_summary_goes_through_the_summary_model(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    with pytest.raises(FileNotFoundError):
        rd.read_summary()
    rd.write_json(files.SUMMARY, {"status": "ok", "model": "resnet50", "framework": "pytorch", "batch_size": 2})
    assert rd.read_summary()["batch_size"] == 2
    rd.summary.write_text(json.dumps({"status": "ok", "model": "resnet50", "framework": "pytorch", "batch_size": "2"}))
    with pytest.raises(summaries.Unreadable, match="batch_size"):
        rd.read_summary()


def test_the_agent_and_the_launcher_start_the_same_summary(tmp_path: Path) -> None:
    """One builder: a summary the launcher writes for an agent that died names the same spec fields
    (the variant too) as the agent's own, and passes the Summary model."""
    from tbdkit.launch.outcome import finalize

    spec = RunSpec(model="bert", batch_size=2, variant="squad")
    started = summaries.start("run-1", spec, "failed", None, started_utc="2026-01-01T00:00:00+00:00")
    (tmp_path / "run-1").mkdir()
    _, written = finalize(tmp_path / "run-1", spec, 1)
    assert written["variant"] == "squad" == started["variant"]
    assert set(started) - {"started_utc"} <= set(written)
    assert {k: written[k] for k in started if k not in ("started_utc", "status", "error")} == \
           {k: started[k] for k in started if k not in ("started_utc", "status", "error")}
    assert RunDir(tmp_path / "run-1").read_summary()["exit_code"] == 1
