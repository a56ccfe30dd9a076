"""ResNet-50 across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """One smoke sample's forward FLOPs as torchvision's network defines them (2 per multiply-accumulate of every
    convolution and dense layer; torch.utils.flop_counter gives exactly these): about 8.2 GFLOPs x (64 / 224)^2 on
    the 64x64 smoke crop, up to the rounding of feature-map sizes."""
    return 671_383_552
