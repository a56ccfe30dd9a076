"""A model's other settings ([setting.<name>] in workload.toml, e.g. BERT's 512-token pre-training
and SQuAD fine-tuning) are selectable: catalog, RunSpec and `tbdkit bench --variant`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tbdkit.spec import catalog
from tbdkit.spec import run_spec as spec
from tbdkit.core.errors import UserError
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from run_invariants import assert_run_holds

BERT = catalog.get("bert")


def test_bert_declares_its_settings():
    assert set(BERT.variants) == {"pretrain512", "squad"}
    assert catalog.get("a3c").variants == {}


def test_variant_sits_between_hparams_and_preset():
    paper512, paper = BERT.hp("paper", "pretrain512"), BERT.hp("paper")
    assert (paper["seq_len"], paper["max_predictions_per_seq"]) == (128, 20)
    assert (paper512["seq_len"], paper512["max_predictions_per_seq"]) == (512, 80)
    squad = BERT.hp("paper", "squad")
    assert squad["task"] == "squad" and squad["seq_len"] == 384 and squad["learning_rate"] == 3e-5
    smoke_squad = BERT.hp("smoke", "squad")          # the preset's sizes win over the setting's
    assert smoke_squad["task"] == "squad" and smoke_squad["seq_len"] == 32 and smoke_squad["learning_rate"] == 1e-3
    assert "description" not in squad and BERT.hp("smoke", None) == BERT.hp("smoke")


def test_unknown_variant_is_one_sentence():
    with pytest.raises(UserError, match="Model 'bert' has no variant 'huge' .*choose one of pretrain512, squad"):
        BERT.hp("smoke", "huge")
    with pytest.raises(UserError, match="Model 'a3c' has no variant 'squad'.*it declares none"):
        catalog.get("a3c").hp("smoke", "squad")


def test_runspec_carries_and_checks_the_variant():
    s = spec.build(model="bert", batch_size=2, variant="squad")
    assert json.loads(s.to_json())["variant"] == "squad"
    assert spec.build(model="bert", batch_size=2).variant is None
    with pytest.raises(UserError, match="variant"):
        spec.build(model="bert", batch_size=2, variant="pretrain1024")


def test_bench_rejects_an_unknown_variant_before_running(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "a3c", "--variant", "squad",
                           "--device", "cpu", "--results", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr
    assert "has no variant 'squad'" in proc.stderr.replace("\n", " ")
    assert not any(tmp_path.iterdir())


def test_bench_trains_bert_squad_smoke(tmp_path):
    """The SQuAD setting through the whole path: CLI, RunSpec, agent, the PyTorch BERT (start/end heads)."""
    proc = subprocess.run([sys.executable, "-m", "tbdkit.cli", "bench", "--model", "bert", "--framework", "pytorch",
                           "--variant", "squad", "--preset", "smoke", "--device", "cpu", "--batch", "2",
                           "--max-warmup-s", "3", "--max-measure-s", "4", "--results", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (run,) = [d for d in (tmp_path / "r").iterdir() if d.is_dir()]
    summary = assert_run_holds(run, indexed=True)
    assert summary["status"] in MEASURED and summary["variant"] == "squad"
    assert json.loads((run / "spec.json").read_text())["variant"] == "squad"
    hp = BERT.hp("smoke", "squad")
    h, i, v = hp["hidden_size"], hp["intermediate_size"], hp["vocab_size"]
    body = (v + hp["max_position_embeddings"] + hp["type_vocab_size"]) * h + 2 * h
    body += hp["num_hidden_layers"] * (4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h)
    assert summary["model_info"]["parameters"] == body + 2 * h + 2     # BertForQuestionAnswering's start/end head
    assert summary["data_source"].startswith("synthetic SQuAD-like question/context windows")


def test_deepspeech2_paper_preset_is_the_trained_5_layer_network():
    """The TBD paper trained 2 conv + 5 GRU layers (Table II, footnote b); the Deep Speech 2 paper's
    7 are the named variant ds2_7layer, and the smoke preset keeps its own small stack under it."""
    ds2 = catalog.get("deepspeech2")
    assert ds2.hp("paper")["rnn_layers"] == 5
    assert set(ds2.variants) == {"ds2_7layer"}
    assert ds2.hp("paper", "ds2_7layer")["rnn_layers"] == 7
    assert ds2.hp("smoke", "ds2_7layer")["rnn_layers"] == ds2.hp("smoke")["rnn_layers"] == 2
    assert "5 bidirectional GRU" in ds2.presets["paper"]["description"]


def test_batch_sweeps_are_the_papers():
    """Faster R-CNN trained at one image per iteration (the paper preset sweeps 1 only; larger batches
    are the `batched` setting); ResNet-50's paper sweep covers the small batches the paper reports."""
    frcnn = catalog.get("faster_rcnn")
    assert frcnn.hp("paper")["batch_sizes"] == [1] and frcnn.default_batch("paper") == 1
    assert set(frcnn.variants) == {"batched"}
    batched = frcnn.hp("paper", "batched")
    assert batched["batch_sizes"] == [1, 2, 4] and batched["default_batch"] == 2 and "preset" not in batched
    assert frcnn.hp("smoke", "batched")["batch_sizes"] == frcnn.hp("smoke")["batch_sizes"]
    assert {8, 16, 32} <= set(catalog.get("resnet50").hp("paper")["batch_sizes"])
