"""WGAN-GP across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """One smoke sample's forward FLOPs: one image generated and scored at DIM 16 (2 per multiply-accumulate)."""
    return 441_192_448


def network_gaps(described: dict, hp: dict) -> list[str]:
    """Generator then critic, each block's shortcut before its residual path (PyTorch's forward order); batch
    norm in the generator, one-group layer norm in the critic."""
    kinds = [x["kind"] for x in described["pytorch"]["layers"]]
    block_g = ["conv2d", "batchnorm", "conv2d", "batchnorm", "conv2d"]
    block_c = ["conv2d", "layernorm", "conv2d", "layernorm", "conv2d"]
    expected = ["dense", *block_g * 4, "batchnorm", "conv2d", "conv2d", *block_c * 4, "dense"]
    return [] if kinds == expected else [f"layer kinds {kinds}, expected {expected}"]
