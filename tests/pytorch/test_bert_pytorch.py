"""BERT on PyTorch (transformers, built from a BertConfig): BERT-large's size, both settings
(pre-training at 128 and 512 tokens, SQuAD fine-tuning) build and train, AMP, nothing downloaded."""

import os
import tomllib

import pytest
import torch

from model_checks import assert_loss_falls
from tbdkit.spec import catalog
from tbdkit.adapters.pytorch import Precision

MODEL = catalog.get("bert")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
CPU = torch.device("cpu")
SETTINGS = tomllib.loads((MODEL.folder / "workload.toml").read_text())["setting"]


def setting(preset, name, **extra):
    """[hparams] < [setting.name] < [preset.preset] (workload.toml's rule), then `extra`."""
    hp = {**MODEL.hparams, **SETTINGS[name], **MODEL.presets[preset], **extra}
    hp.pop("description")
    return hp


def expected_parameters(hp):
    """Embeddings (+LayerNorm), L encoder layers, then the task's heads (the MLM decoder is tied)."""
    h, i, v = hp["hidden_size"], hp["intermediate_size"], hp["vocab_size"]
    embeddings = (v + hp["max_position_embeddings"] + hp["type_vocab_size"]) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    body = embeddings + hp["num_hidden_layers"] * layer
    if hp["task"] == "squad":
        return body + 2 * h + 2                                        # start/end logits
    pooler, mlm, nsp = h * h + h, (h * h + h) + 2 * h + v, 2 * h + 2
    return body + pooler + mlm + nsp


def count_on_meta(hp):
    with torch.device("meta"):
        return sum(p.numel() for p in WORKLOAD.make_model(hp).parameters())


@pytest.mark.parametrize("hp", [MODEL.hp("smoke"), MODEL.hp("paper"), setting("paper", "squad"),
                                setting("paper", "pretrain512")], ids=["smoke", "paper", "squad", "512"])
def test_parameter_count_matches_the_hyperparameters(hp):
    assert count_on_meta(hp) == expected_parameters(hp)


def test_bert_large_size():
    # Devlin et al. give 340 M; BertForPreTraining counts 336.2 M with the decoder tied to the embeddings.
    assert expected_parameters(MODEL.hp("paper")) == 336_226_108
    squad = setting("paper", "squad")
    assert expected_parameters(squad) == 334_094_338
    assert (squad["seq_len"], squad["learning_rate"]) == (384, 3e-5)
    assert setting("paper", "pretrain512")["max_predictions_per_seq"] == 80
    config = WORKLOAD.config(MODEL.hp("paper"))
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (24, 1024, 16)


def test_sequence_longer_than_the_positions_is_refused():
    with pytest.raises(ValueError, match="seq_len 512 exceeds max_position_embeddings 64"):
        WORKLOAD.config({**MODEL.hp("smoke"), "seq_len": 512})


def test_schedule_warms_up_then_decays_linearly():
    f = WORKLOAD.linear_warmup_decay(10_000, 1_000_000)
    assert f(0) == pytest.approx(1e-4) and f(4_999) == pytest.approx(0.5)
    assert f(9_999) == pytest.approx(0.99) and f(499_999) == pytest.approx(0.5) and f(2_000_000) == 0.0


def test_smoke_squad_fine_tuning_reduces_the_loss():
    hp = setting("smoke", "squad", seq_len=48, max_query_length=12)
    torch.manual_seed(0)
    training = WORKLOAD.build(hp, CPU)
    assert type(training.model).__name__ == "BertForQuestionAnswering"
    inputs = WORKLOAD.to_device(next(DATA.batches("synthetic", hp, 8, 1)), CPU)
    precision = Precision("fp32", CPU)
    assert_loss_falls([float(WORKLOAD.train_step(training, inputs, precision)) for _ in range(6)], 0.95)


def test_nothing_is_downloaded():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    source = (MODEL.folder / "pytorch.py").read_text()
    assert "from_pretrained" not in source
