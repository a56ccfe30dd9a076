"""Seq2Seq (NMT IWSLT15 attention model) on PyTorch: the network matches workload.toml, attention
ignores padding, the tutorial's decay schedule, training, AMP."""

import math

import pytest
import torch

from checks import CPU, amp_step_loss, assert_loss_decreases, assert_no_timing_logging_or_profiling, smoke_losses
from tbdkit import catalog

MODEL = catalog.get("seq2seq")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")


def expected_parameters(hp):
    """Embeddings, 1 bi-LSTM layer, 2 decoder LSTM cells (input feeding), attention, projection.
    PyTorch LSTMs have b_ih and b_hh: 8u biases per cell."""
    u, vs, vt = hp["num_units"], hp["source_vocab_size"], hp["target_vocab_size"]
    lstm = lambda inp: 4 * u * (inp + u) + 8 * u  # noqa: E731
    return (vs * u + vt * u + 2 * lstm(u) + lstm(2 * u) + lstm(u)
            + 2 * u * u + 1 + 3 * u * u + u * vt)   # memory layer, scale g, attention layer, projection


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    model = WORKLOAD.Seq2Seq(hp)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(hp)
    assert model.encoder.bidirectional and len(model.cells) == hp["decoder_layers"]


def test_paper_size():
    # 512 units, vocabularies 17191 (en) and 7709 (vi): 27.46 M; TensorFlow's single-bias cells: 8192 fewer.
    assert expected_parameters(MODEL.hp("paper")) == 27_460_097


def test_other_architectures_are_refused():
    with pytest.raises(ValueError, match="tutorial's IWSLT15 architecture"):
        WORKLOAD.Seq2Seq({**MODEL.hp("smoke"), "attention": "bahdanau"})


def test_initialization_and_forget_bias():
    hp = MODEL.hp("smoke")
    model = WORKLOAD.Seq2Seq(hp)
    u = hp["num_units"]
    bias = model.cells[0].bias_ih.detach()
    assert 0.9 <= float(bias[u:2 * u].min()) and float(bias[u:2 * u].max()) <= 1.1
    assert float(model.project.weight.detach().abs().max()) <= hp["init_weight"]
    assert float(model.scale.detach()) == 1.0


def test_attention_ignores_source_padding():
    hp = {**MODEL.hp("smoke"), "dropout": 0.0}
    torch.manual_seed(0)
    model = WORKLOAD.Seq2Seq(hp).eval()
    batch = next(DATA.batches("synthetic", hp, 4, seed=2))
    x = WORKLOAD.to_device(batch, CPU)
    pad = torch.arange(batch.source.shape[1])[None, :] >= x["source_lengths"][:, None]
    assert pad.any()
    with torch.no_grad():
        logits = model(x["source"], x["source_lengths"], x["target_in"])
        assert logits.shape == (*batch.target_in.shape, hp["target_vocab_size"])
        source = x["source"].clone()
        source[pad] = 7
        assert torch.allclose(logits, model(source, x["source_lengths"], x["target_in"]), atol=1e-5)


def test_luong234_decay():
    schedule = WORKLOAD.luong234(12000)
    assert [schedule(s) for s in (0, 7999, 8000, 8999, 9000, 11999, 12000)] == [1, 1, 1, 1, 0.5, 0.125, 0.0625]


def test_smoke_training_reduces_the_loss():
    assert_loss_decreases(smoke_losses("seq2seq", batch_size=8, steps=10), 0.95)


def test_amp_step_runs_on_cpu():
    assert math.isfinite(amp_step_loss("seq2seq", 4))


def test_workload_file_holds_no_timing_logging_or_profiling():
    assert_no_timing_logging_or_profiling("seq2seq")


def test_lstm_canonical_form_matches_the_reference_lstm():
    """PyTorch's bidirectional LSTM in canonical form (gates i, f, g, o, two biases) against the NumPy LSTM."""
    import numpy as np

    from tbdkit.adapters.pytorch import canonical_layers
    from tbdkit.canonical import reference_lstm

    lstm = torch.nn.LSTM(4, 5, bidirectional=True)
    x = torch.randn(7, 1, 4, generator=torch.Generator().manual_seed(0))
    out = lstm(x)[0].detach().numpy()
    fwd, bwd = canonical_layers(lstm, lambda: lstm(x))
    assert (fwd.kind, fwd.direction, bwd.direction, fwd.positions) == ("lstm", "forward", "backward", 7)
    np.testing.assert_allclose(out[:, 0, :5], reference_lstm(x.numpy(), fwd.params)[0][:, 0], atol=1e-5)
    np.testing.assert_allclose(out[:, 0, 5:], reference_lstm(x.numpy()[::-1], bwd.params)[0][::-1, 0], atol=1e-5)


def test_forward_gives_log_probabilities_and_target_lengths():
    hp = MODEL.hp("smoke")
    training = WORKLOAD.build(hp, CPU)
    batch = next(DATA.synthetic_batches(hp, 3, seed=0))
    log_probs, lengths = WORKLOAD.forward(training, WORKLOAD.to_device(batch, CPU))
    assert log_probs.shape == (*batch.target_in.shape, hp["target_vocab_size"])
    assert lengths.tolist() == batch.target_lengths.tolist() and training.model.training
