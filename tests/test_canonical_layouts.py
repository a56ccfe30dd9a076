"""The canonical layouts `describe` prints: one entry per layer kind, each covering every layer mapped to it."""

from tbdkit.describe import canonical


def test_layernorm_layout_covers_groupnorm_channels():
    # GroupNorm(1, C) (WGAN-GP's critic) maps to "layernorm" with per-channel gamma/beta; a second
    # "layernorm" key in the dict literal once silently replaced this entry with the (dim,) one.
    for param in ("gamma", "beta"):
        assert "(channels,)" in canonical.LAYOUTS["layernorm"][param]
        assert "(dim,)" in canonical.LAYOUTS["layernorm"][param]


def test_embedding_layout():
    assert canonical.LAYOUTS["embedding"] == {"weight": "(vocabulary, dim)"}
