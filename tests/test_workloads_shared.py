"""The workloads' shared package: one place for what the workload files share, reached through the
import path the catalog sets once (no workload file edits sys.path)."""

import re
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"


def test_no_workload_file_edits_the_import_path() -> None:
    edits = [f"{p.relative_to(WORKLOADS)}:{n}" for p in sorted(WORKLOADS.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bsys\.path\b", line)]
    assert edits == []


def test_the_shared_code_lives_in_one_package() -> None:
    shared = sorted(p.name for p in WORKLOADS.iterdir() if p.is_dir() and p.name.startswith("_"))
    assert shared == ["_shared"], shared
    assert (WORKLOADS / "_shared" / "__init__.py").is_file()


def test_every_reader_raises_the_one_shared_data_error() -> None:
    from tbdkit.spec import catalog
    from model_checks import load_data

    readers = {m: load_data(m) for m in catalog.models()}
    from _shared.errors import DataError  # on the path now, as the catalog's loader puts it

    assert {m: d.DataError is DataError for m, d in readers.items()} == {m: True for m in readers}


def test_the_kit_tells_the_shared_data_error_from_a_lookalike() -> None:
    from tbdkit.spec import catalog
    from model_checks import load_data

    shared = load_data("deepspeech2").DataError
    lookalike = type("DataError", (Exception,), {})
    assert catalog.is_data_error(shared("no utterances: pass a LibriSpeech folder"))
    assert not catalog.is_data_error(lookalike("x")) and not catalog.is_data_error(ValueError("x"))


def test_each_paper_models_workload_toml_names_the_papers_dominant_layer() -> None:
    import tomllib

    from tbdkit.spec import catalog
    paper = tomllib.loads((Path(__file__).resolve().parents[1] / "tbdkit" / "report" / "tbd-paper.toml").read_text())
    # every model of the paper is in the catalog with the paper's layer; a model that is not the paper's needs no row
    in_catalog = {m.name: m.dominant_layer for m in catalog.models().values()}
    assert {m["name"]: in_catalog.get(m["name"]) for m in paper["model"]} == \
        {m["name"]: m["dominant_layer"] for m in paper["model"]}


def test_the_reports_model_families_come_from_each_workload_toml(tmp_path, monkeypatch) -> None:
    from tbdkit.core import paths
    from tbdkit.report import runs

    for name, layer in (("gru_net", "RNN (GRU)"), ("lstm_net", "LSTM"), ("conv_net", "CONV")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "workload.toml").write_text(f'[model]\nname = "{name}"\ndominant_layer = "{layer}"\n')
    monkeypatch.setattr(paths, "KIT_WORKLOADS", tmp_path)
    assert runs.layer_family("RNN", "LSTM") == {"gru_net", "lstm_net"} and runs.layer_family("LSTM") == {"lstm_net"}
    monkeypatch.undo()
    assert runs.rnn_models() == {"deepspeech2", "seq2seq"} and runs.lstm_models() == {"seq2seq"}


def test_a_workload_toml_without_its_dominant_layer_is_one_clear_error(tmp_path, monkeypatch) -> None:
    import pytest

    from tbdkit.spec import catalog
    from tbdkit.core.errors import UserError

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "workload.toml").write_text('[model]\nname = "m"\n')
    monkeypatch.setenv("TBDKIT_WORKLOAD_PATH", str(tmp_path))
    with pytest.raises(UserError, match="dominant_layer"):
        catalog.models()


def test_the_readers_share_one_dispatcher_and_one_synthetic_name() -> None:
    texts = {p.parent.name: p.read_text() for p in sorted(WORKLOADS.glob("*/data.py"))}
    assert [m for m, t in texts.items() if 'SYNTHETIC = "synthetic"' in t] == []
    assert [m for m, t in texts.items() if "if source == SYNTHETIC:\n        return synthetic_batches" in t] == []


def test_the_pytorch_amp_update_is_written_once() -> None:
    copies = [p.parent.name for p in sorted(WORKLOADS.glob("*/pytorch.py"))
              if "precision.scaler.scale(loss).backward()" in p.read_text()]
    assert copies == []
    assert "precision.scaler.scale(loss).backward()" in (WORKLOADS / "_shared" / "torch_amp.py").read_text()
