"""Seq2Seq (NMT IWSLT15 attention model) on PyTorch: the network matches workload.toml, attention
ignores padding, the tutorial's decay schedule, training, AMP; the converge preset's number-words task."""


import pytest
import torch

from model_checks import converge_briefly
from tbdkit.spec import catalog

MODEL = catalog.get("seq2seq")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
CPU = torch.device("cpu")


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


def test_lstm_canonical_form_matches_the_reference_lstm():
    """PyTorch's bidirectional LSTM in canonical form (gates i, f, g, o, two biases) against the NumPy LSTM."""
    import numpy as np

    from tbdkit.describe.pytorch import canonical_layers
    from tbdkit.describe.canonical import reference_lstm

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


# The converge preset's task: English -> Vietnamese number words (num2words)

SMALL = {"train_numbers": 3000, "held_out_numbers": 256}  # a quicker task of the same vocabularies


def sentences(batch, field, lengths):
    return {tuple(row[:n]) for row, n in zip(getattr(batch, field).tolist(), lengths.tolist())}


def test_english_tokens_are_words_without_commas_or_hyphens():
    assert DATA.tokenize_english("twenty-one thousand, three hundred and forty-five") == [
        "twenty", "one", "thousand", "three", "hundred", "and", "forty", "five"]


def test_converge_task_is_number_words_with_a_fixed_held_out_set():
    import numpy as np

    hp = MODEL.hp("converge")
    task = DATA.convergence_task("synthetic", hp, 64, seed=0)
    other = DATA.convergence_task("synthetic", hp, 64, seed=1)
    assert sum(b.samples for b in task.held_out) == hp["held_out_numbers"] == 2000
    for mine, theirs in zip(task.held_out, other.held_out, strict=True):  # the same for every seed
        assert np.array_equal(mine.source, theirs.source) and np.array_equal(mine.target_out, theirs.target_out)
    batch, batch1 = next(task.train), next(other.train)
    assert not np.array_equal(batch.source, batch1.source)                # the seed shuffles the training numbers
    n, t = batch.target_in.shape
    assert batch.source.shape[0] == n == 64 and batch.target_out.shape == (n, t) and batch.source.dtype == np.int64
    assert (batch.target_in[:, 0] == 1).all()                             # <s>
    real = batch.target_out >= 0
    assert (real.sum(axis=1) == batch.target_lengths).all()
    assert (batch.target_out[np.arange(n), batch.target_lengths - 1] == 2).all()  # each target ends with </s>
    assert batch.source.max() < hp["source_vocab_size"] and batch.target_out.max() < hp["target_vocab_size"]
    for b in task.held_out:
        assert b.source.min() > 0 and b.target_out[b.target_out >= 0].min() > 0  # no <unk>: the vocabularies cover it
        assert b.source_lengths.max() <= 11 and b.target_lengths.max() <= 12
    everything = next(DATA.convergence_task("synthetic", hp, hp["train_numbers"], 0).train)  # one epoch
    assert len(sentences(everything, "source", everything.source_lengths)) == hp["train_numbers"]
    held = set().union(*(sentences(b, "source", b.source_lengths) for b in task.held_out))
    assert len(held) == 2000 and not held & sentences(everything, "source", everything.source_lengths)
    with pytest.raises(DATA.DataError, match="leave DATA unset"):
        DATA.convergence_task("/some/folder", hp, 64, 0)
    with pytest.raises(DATA.DataError, match="set target_vocab_size = 19"):
        DATA.convergence_task("synthetic", {**hp, "target_vocab_size": 7709}, 64, 0)


def test_a_missing_num2words_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "num2words", None)   # `import num2words` raises ImportError
    with pytest.raises(DATA.DataError, match="pip install num2words"):
        DATA.convergence_task("synthetic", {**MODEL.hp("converge"), "train_numbers": 7, "held_out_numbers": 3}, 4, 0)


def test_quality_is_teacher_forced_token_accuracy_over_non_padding_positions():
    import numpy as np

    hp = {**MODEL.hp("converge"), **SMALL}
    held_out = DATA.convergence_task("synthetic", hp, 100, 0).held_out
    v = hp["target_vocab_size"]

    def outputs(predict):
        out = []
        for b in held_out:
            tokens = np.where(b.target_out >= 0, predict(b), 5)     # padding positions predict junk
            out.append((np.log(np.eye(v)[tokens] * 0.9 + 0.1 / v), b.target_lengths))
        return out

    assert DATA.quality(outputs(lambda b: b.target_out), held_out) == 1.0
    tokens = sum(int(b.target_lengths.sum()) for b in held_out)
    assert DATA.quality(outputs(lambda b: np.full_like(b.target_out, 2)), held_out) == pytest.approx(256 / tokens)  # only </s>
    with pytest.raises(ValueError, match="target lengths"):
        DATA.quality([(lp, n + 1) for lp, n in outputs(lambda b: b.target_out)], held_out)


def test_converge_trains_seq2seq_on_number_words_and_records_the_curve(tmp_path):
    hp = {**MODEL.hp("converge"), **SMALL, "eval_every_s": 2.0, "max_train_s": 5.0, "target": 1.01}
    out = converge_briefly("seq2seq", hp, 32, tmp_path)
    c = out["convergence"]
    assert c["first_quality"] < 0.5 and c["held_out_samples"] == 256  # untrained: near chance
    assert "number words" in out["data_source"]
