"""Inception-v3 across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """One smoke sample's forward FLOPs as torchvision's network defines them (2 per multiply-accumulate of every
    convolution and dense layer): about 11.4 GFLOPs x (160 / 299)^2 on the 160x160 smoke crop, up to the rounding
    of feature-map sizes."""
    return 2_558_945_984
