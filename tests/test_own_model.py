"""A model of your own, from outside the kit, as docs/your-own-model.md has a user do it: the worked example
docs/examples/covtype_mlp copied to a folder outside the repo, then, typed from the repo root, listed beside
the kit's models, benched on PyTorch, described, reported, bundled with its files and their hashes, and
reproduced from the bundle where its folder no longer exists. Then each mistake a user can make with
`--workloads`: one sentence that names the folder(s) and the fix."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tbdkit.cli.main import app
from tbdkit.core.paths import BUNDLED_WORKLOADS_ENV, WORKLOAD_PATH_ENV
from tbdkit.spec import catalog
from run_invariants import assert_run_holds

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "covtype_mlp"
TBDKIT = ".venv/bin/tbdkit"  # as a user types it from the repo root
FAST = ["--framework", "pytorch", "--preset", "smoke", "--device", "cpu", "--max-warmup-s", "3", "--max-measure-s", "4"]
FILES = ("workload.toml", "data.py", "pytorch.py")


def typed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/tbdkit ARGS` from the repo root, with no folder of the user's on the path unless `env` adds one."""
    base = {k: v for k, v in os.environ.items() if k not in (WORKLOAD_PATH_ENV, BUNDLED_WORKLOADS_ENV)}
    return subprocess.run([TBDKIT, *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**base, "COLUMNS": "250", **(env or {})})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """The example in a folder of the user's (a folder of model folders), and one smoke bench of it."""
    mine = tmp_path_factory.mktemp("my-models")
    shutil.copytree(EXAMPLE, mine / "covtype_mlp", ignore=shutil.ignore_patterns("__pycache__"))
    results = tmp_path_factory.mktemp("results")
    proc = typed("bench", "--model", "covtype_mlp", "--batch", "16", *FAST, "--results", str(results),
                 "--workloads", str(mine))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    assert_run_holds(run, indexed=True)
    return mine, results, run


def test_listed_beside_the_kits_models(benched):
    mine, _, _ = benched
    for args, env in ((["--workloads", str(mine)], None), ([], {WORKLOAD_PATH_ENV: str(mine / "covtype_mlp")})):
        proc = typed("list", *args, env=env)
        assert proc.returncode == 0, proc.stderr
        rows = {line.split("│")[1].strip() for line in proc.stdout.splitlines() if line.count("│") > 3}
        assert {"covtype_mlp", "resnet50", "deepspeech2"} <= rows
    assert "covtype_mlp" not in typed("list").stdout  # added only where asked for


def test_it_passes_check_workload_as_the_docs_say(benched):
    """docs/your-own-model.md's step 3 as typed: every check runs in the PyTorch stack and passes; the table says
    what each found (the smoke count from [checks], the learning check's losses, the FLOPs the analyses counted)."""
    mine, _, _ = benched
    proc = typed("check-workload", str(mine / "covtype_mlp"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {cells[1].strip(): cells[3].strip() for line in proc.stdout.splitlines()
            if (cells := line.split("│")) and len(cells) > 4 and cells[1].strip()}
    assert {rows[c] for c in ("contract", "model code only", "parameters", "learning", "math modes", "analyses")} == {
        "passed"}  # fmt: skip
    assert "5,831 on the smoke preset" in proc.stdout and "in 10 steps" in proc.stdout
    assert "FLOP per sample" in " ".join(proc.stdout.replace("│", " ").split())


def test_its_run_records_the_files_and_hyperparameters_it_trained(benched):
    mine, _, run = benched
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] in ("ok", "disturbed") and summary["model"] == "covtype_mlp"
    assert summary["metrics"]["throughput"]["value"] > 0 and summary["metrics"]["throughput"]["unit"] == "samples/s"
    record = json.loads((run / "spec.json").read_text())["workload"]
    folder = mine / "covtype_mlp"
    assert record["origin"] == "outside" and Path(record["folder"]) == folder
    assert record["files"] == {name: sha256(folder / name) for name in FILES}
    shared = ROOT / "workloads" / "_shared"
    assert record["shared"] == {f"_shared/{n}": sha256(shared / n)
                                for n in ("__init__.py", "batches.py", "errors.py", "torch_amp.py")}
    assert record["hparams"]["hidden"] == [64, 32] and record["hparams"]["default_batch"] == 32  # the smoke preset's
    mllog = (run / "mllog.txt").read_text()
    assert "tbd_covtype_mlp" in mllog and "workload.hparams" in mllog  # its hyperparameters from the run's record


def test_describe_counts_its_parameters_and_flops(benched):
    mine, _, _ = benched
    proc = typed("describe", "covtype_mlp", "--json", "--workloads", str(mine))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["parameters"] == 54 * 64 + 64 + 64 * 32 + 32 + 32 * 7 + 7
    # a Linear layer's forward is 2 FLOPs per weight: one multiply and one add
    assert info["flops_per_sample"]["forward"] == 2 * (54 * 64 + 64 * 32 + 32 * 7)
    assert info["flops_per_sample"]["reference_sample"]["input_shape"] == [54]


def test_the_report_shows_it(benched, tmp_path):
    mine, results, run = benched
    proc = typed("report", str(results), "-o", str(tmp_path / "report"), "--workloads", str(mine))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "covtype_mlp" in (tmp_path / "report" / "report.md").read_text()


def test_bundle_carries_it_and_reproduce_runs_the_bundled_copy(benched, tmp_path):
    mine, results, run = benched
    bundle = tmp_path / "artifact.tar.gz"
    proc = typed("bundle", str(results), "-o", str(bundle), "--workloads", str(mine))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(bundle) as tar:
        members = {m.name.removeprefix("tbdkit-artifact/"): tar.extractfile(m).read() for m in tar if m.isfile()}
    manifest = json.loads(members["manifest.json"])
    for name in FILES:
        assert members[f"workloads/covtype_mlp/{name}"] == (mine / "covtype_mlp" / name).read_bytes()
    assert manifest["workloads"]["covtype_mlp"]["same_as_runs"] == [run.name]
    recorded = json.loads(members[f"results/{run.name}/spec.json"])["workload"]["files"]
    assert recorded == {n: hashlib.sha256(members[f"workloads/covtype_mlp/{n}"]).hexdigest() for n in FILES}
    assert "MODEL=covtype_mlp" in members["ARTIFACT.md"].decode() and \
        "WORKLOADS=tbdkit-artifact/workloads" in members["ARTIFACT.md"].decode()

    # the evaluator's side: the user's folder is gone and on no path; only the bundle holds the model
    gone = mine.with_name(mine.name + "-moved")
    mine.rename(gone)
    try:
        again = tmp_path / "fresh"
        proc = typed("reproduce", str(bundle), "--yes", "-r", str(again))
    finally:
        gone.rename(mine)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (new_run,) = [p for p in again.iterdir() if p.is_dir()]
    record = json.loads((new_run / "spec.json").read_text())["workload"]
    assert record["origin"] == "bundled" and record["files"] == recorded
    assert "tbdkit-bundled-workloads-" in record["folder"] and not Path(record["folder"]).exists()  # removed after
    assert assert_run_holds(new_run)["status"] in ("ok", "disturbed")
    reports = list(again.glob("reproduce-*.json"))
    assert [p["model"] for p in json.loads(reports[0].read_text())["points"]] == ["covtype_mlp"]


def test_reproduce_says_when_the_installed_model_differs(tmp_path, monkeypatch):
    """A bundled model's files against a same-named model installed here: one line, and the bundle's are used."""
    from tbdkit.artifact import workloads as carried

    bundled = tmp_path / "bundled"
    shutil.copytree(EXAMPLE, bundled / "covtype_mlp", ignore=shutil.ignore_patterns("__pycache__"))
    here = tmp_path / "here" / "covtype_mlp"
    shutil.copytree(EXAMPLE, here, ignore=shutil.ignore_patterns("__pycache__"))
    (here / "pytorch.py").write_text((here / "pytorch.py").read_text() + "\n# changed here\n")
    monkeypatch.setenv(WORKLOAD_PATH_ENV, str(here))
    monkeypatch.delenv(BUNDLED_WORKLOADS_ENV, raising=False)
    (line,) = carried.differences_here({}, [bundled / "covtype_mlp"])
    assert "covtype_mlp" in line and str(here) in line and "pytorch.py" in line and "the bundle's" in line
    catalog.use_bundled([bundled / "covtype_mlp"])
    assert catalog.get("covtype_mlp").folder == bundled / "covtype_mlp"  # not a clash: the bundle's copy runs
    assert catalog.get("covtype_mlp").origin == "bundled"


# ---------------------------------------------------------------------------------------------------
# What a user can get wrong: one sentence naming the folder(s), and the fix


def refused(*args: str) -> str:
    result = CliRunner().invoke(app, ["list", *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return " ".join(result.output.split())


def a_model(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "workload.toml").write_text(f'[model]\nname = "{name}"\ndominant_layer = "FC"\n')
    return folder


@pytest.fixture(autouse=True)
def no_user_folders(monkeypatch):
    monkeypatch.delenv(WORKLOAD_PATH_ENV, raising=False)
    monkeypatch.delenv(BUNDLED_WORKLOADS_ENV, raising=False)


def test_a_name_of_the_kits_is_refused_naming_both_folders(tmp_path):
    mine = a_model(tmp_path / "mine", "resnet50")
    said = refused("--workloads", str(mine))
    assert "'resnet50'" in said and str(mine) in said and str(ROOT / "workloads" / "resnet50") in said
    assert "rename one" in said


def test_two_folders_with_one_name_are_refused_naming_both(tmp_path):
    first, second = a_model(tmp_path / "a" / "m", "twin"), a_model(tmp_path / "b" / "m", "twin")
    said = refused("--workloads", str(tmp_path / "a"), "--workloads", str(second))
    assert str(first) in said and str(second) in said and "'twin'" in said


def test_a_folder_without_a_workload_toml(tmp_path):
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    said = refused("--workloads", str(tmp_path / "empty"))
    assert f"{tmp_path / 'empty'} holds no workload.toml" in said and "pass a model's folder" in said
    a_model(tmp_path / "deep" / "group" / "m", "m")
    said = refused("--workloads", str(tmp_path / "deep"))
    assert "one lies deeper" in said and str(tmp_path / "deep" / "group" / "m" / "workload.toml") in said
    assert "does not exist" in refused("--workloads", str(tmp_path / "nowhere"))


def test_a_broken_workload_toml(tmp_path):
    mine = a_model(tmp_path / "m", "m")
    (mine / "workload.toml").write_text('[model]\nname = "m"\ndominant_layer = \n')
    said = refused("--workloads", str(mine))
    assert f"{mine / 'workload.toml'} is not valid TOML" in said
    (mine / "workload.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nests arrays or tables deeper than a TOML reader can follow" in refused("--workloads", str(mine))
    (mine / "workload.toml").write_text('[model]\nname = "../m"\ndominant_layer = "FC"\n')
    assert "letters, digits and '_'" in refused("--workloads", str(mine))


def test_an_unreadable_folder(tmp_path, monkeypatch):
    folder = tmp_path / "locked"
    folder.mkdir()
    real_is_file = Path.is_file

    def denied(self: Path) -> bool:  # as os.stat fails in a folder without the x bit (root reads any folder)
        if self.parent == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", denied)
    said = refused("--workloads", str(folder))
    assert f"{folder} cannot be read (Permission denied)" in said and f"chmod -R u+rX {folder}" in said


# ---------------------------------------------------------------------------------------------------
# Every launcher carries the folder: docker mounts it read-only, rendered files name it


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """The example as a model of the user's, on TBDKIT_WORKLOAD_PATH, and a run spec of it."""
    from tbdkit.spec import run_spec

    mine = tmp_path / "mine" / "covtype_mlp"
    shutil.copytree(EXAMPLE, mine, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv(WORKLOAD_PATH_ENV, str(mine.parent))
    return mine, lambda **kw: run_spec.build(**{"model": "covtype_mlp", "batch_size": 4, **kw})


def test_docker_mounts_the_folder_read_only(outside, tmp_path):
    from tbdkit.env import images
    from tbdkit.launch import docker

    mine, build = outside
    image = {"ref": "tbdkit/pytorch:0.1.0", "id": "sha256:" + "ab" * 32, "repo_digests": [],
             "labels": {"org.opencontainers.image.base.name": "nvcr.io/nvidia/pytorch:25.12-py3",
                        "org.opencontainers.image.revision": "c0ffee"}}
    argv = docker.render(build(launcher="docker", device="cpu"), tmp_path / "run", image,
                         images.GpuAccess(None, "none"))
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert f"{mine}:/tbdkit/workloads-outside/covtype_mlp:ro" in volumes
    assert f"{WORKLOAD_PATH_ENV}=/tbdkit/workloads-outside/covtype_mlp" in envs
    kit_argv = docker.render(build(model="deepspeech2", launcher="docker", device="cpu"), tmp_path / "r2", image,
                             images.GpuAccess(None, "none"))
    assert not [a for a in kit_argv if "workloads-outside" in a]  # the image holds the kit's own models


def test_rendered_files_name_the_folder(outside, tmp_path):
    from tbdkit.launch import render

    mine, build = outside
    spec = build(nodes=2, launcher="netns", preset="paper")
    mount = "/tbdkit/workloads-outside/covtype_mlp"
    torchrun = render.render(spec, "torchrun", python="/usr/bin/python3")
    assert f"DEFAULT_WORKLOAD_DIR={mine}" in torchrun
    assert f'export {WORKLOAD_PATH_ENV}="${{WORKLOAD_DIR:-$DEFAULT_WORKLOAD_DIR}}"' in torchrun
    slurm = render.render(spec, "slurm")
    assert f"DEFAULT_WORKLOAD_DIR={mine}" in slurm and f"export {WORKLOAD_PATH_ENV}={mount}" in slurm
    assert f'MOUNTS="$RESULTS:/results,$WORKLOAD_DIR:"{mount}":ro"' in slurm and slurm.count('"$MOUNTS"') == 1
    compose = render.render(spec, "compose")
    assert compose.count(f'"{mine}:{mount}:ro"') == 2 and compose.count(f'{WORKLOAD_PATH_ENV}: "{mount}"') == 2
    k8s = render.render(spec, "k8s")
    assert f'path: "{mine}"' in k8s and f'mountPath: "{mount}"' in k8s and f'value: "{mount}"' in k8s
    out = render.write(spec, "slurm", tmp_path / "job")
    assert json.loads((out.parent / "spec.json").read_text())["workload"]["origin"] == "outside"
    for target in ("torchrun", "slurm", "compose", "k8s"):  # the kit's own model: nothing of the kind
        assert "workloads-outside" not in render.render(build(model="resnet50", nodes=2, launcher="netns",
                                                               preset="paper"), target, python="/usr/bin/python3")


def test_the_agents_environment_carries_the_folders(tmp_path, monkeypatch):
    """native, netns and the rendered TensorFlow/MXNet node runner start the agent with this environment."""
    from tbdkit.env import stacks

    mine = a_model(tmp_path / "mine" / "m", "m")
    monkeypatch.setenv(WORKLOAD_PATH_ENV, str(tmp_path / "earlier"))
    (tmp_path / "earlier").mkdir()
    catalog.add_outside([tmp_path / "mine", mine.parent])  # the same folder twice is kept once, first
    assert stacks.agent_env()[WORKLOAD_PATH_ENV] == f"{tmp_path / 'mine'}:{tmp_path / 'earlier'}"


def test_a_run_of_a_kit_model_recorded_on_other_files_is_said():
    from tbdkit.artifact import workloads as carried

    from tbdkit.spec import catalog, provenance

    files = provenance.record(catalog.get("deepspeech2"), catalog.get("deepspeech2").hp("smoke")).files
    spec = {"model": "deepspeech2", "workload": {"origin": "kit", "files": {**files, "pytorch.py": "0" * 64}}}
    (line,) = carried.differences_here({"results/r1/spec.json": json.dumps(spec).encode()}, [])
    assert line.startswith("model deepspeech2: this kit's files differ") and "(pytorch.py)" in line, line
    assert carried.differences_here({"results/r1/spec.json": json.dumps(spec | {"workload": {
        "origin": "kit", "files": files}}).encode()}, []) == []  # the same files: nothing said


def test_the_record_of_a_model_that_imports_nothing_shared(tmp_path, monkeypatch):
    """An outside model need not use the kit's _shared package: its record then lists no _shared file."""
    from tbdkit.spec import provenance

    mine = a_model(tmp_path / "m", "plain")
    (mine / "data.py").write_text("import numpy as np\n")
    (mine / "pytorch.py").write_text("from _shared import torch_amp as amp\n")
    (mine / "reference").mkdir()
    (mine / "reference" / "summary.json").write_text("{}")
    model = catalog._load(mine, catalog.OUTSIDE)
    record = provenance.record(model, {"lr": 0.1})
    assert sorted(record.files) == ["data.py", "pytorch.py", "workload.toml"]  # reference/ results are not code
    assert sorted(record.shared) == ["_shared/__init__.py", "_shared/torch_amp.py"]
    (mine / "pytorch.py").write_text("import torch\n")
    assert provenance.record(model, {}).shared == {}
    monkeypatch.setattr(provenance, "MAX_FILES", 2)  # a dataset kept in the model's folder: one sentence
    with pytest.raises(catalog.UserError, match=f"The model folder {mine} holds 3 files .* --data"):
        provenance.record(model, {})
