"""Mask R-CNN across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of the smoke reference image (640x480, resized to 256x192, no padding): ResNet-50 and the FPN on
    the whole image, the RPN head on P2-P6, the box head (TwoMLPHead and predictor) on the 32 sampled RoIs, the mask
    head and predictor on the positives among them. Unlike the box head's, the mask head's count depends on how
    many positives the RoI sampler finds (6 here, under the quota of 8): it is the same in every framework because
    with the same weights all compute the same proposals, and so the same positives (each 14x14 map: 1.06 GFLOPs
    in the mask head)."""
    return 25_737_742_336


def network_gaps(described: dict, hp: dict) -> list[str]:
    """ResNet-50 (53 convolutions, each with its batch norm), the FPN's 8 (lateral and output, the coarsest level
    first), the RPN head's 3, the box head's 4 dense layers, then the mask head's four 3x3 convolutions, its
    transposed convolution and the per-class 1x1, in PyTorch's forward order; torchvision's 44,401,393 parameters
    plus the batch norms' scales and offsets; the mask head on whole 14x14 maps, one per positive RoI (the
    transposed convolution counted at its input); ResNet-50's 53 bias-free convolutions and their batch norms
    (gamma, beta), with biases the FPN's 8 convolutions, the RPN head's 3, the mask head's 4, its transposed
    convolution and 1x1, and 4 dense layers: the weights every framework exchanges."""
    d = described["pytorch"]
    layers = d["layers"]
    kinds = [x["kind"] for x in layers]
    gaps = []
    if kinds.count("conv2d") != 53 + 8 + 3 + 5 or kinds.count("batchnorm") != 53:
        gaps.append(f"{kinds.count('conv2d')} convolutions and {kinds.count('batchnorm')} batch norms, not 69 and 53")
    if kinds[-10:] != ["dense"] * 4 + ["conv2d"] * 4 + ["conv_transpose2d", "conv2d"]:
        gaps.append(f"the last layers are {kinds[-10:]}, not the box head's 4 dense layers and the mask head")
    norms = sum(_size(shape) for x in layers if x["kind"] == "batchnorm" for shape in x["params"].values())
    if d["parameters"] - norms != 44_401_393:
        gaps.append(f"{d['parameters'] - norms:,} parameters besides the batch norms, torchvision's 44,401,393")
    positives = layers[-1]["positions_per_sample"] // 28**2
    if positives < 1 or [x["positions_per_sample"] for x in layers[-6:-1]] != [positives * 14**2] * 5:
        gaps.append(f"the mask head's positions {[x['positions_per_sample'] for x in layers[-6:]]} are not whole "
                    "14x14 maps, one per positive RoI")  # fmt: skip
    arrays, expected = sum(len(x["params"]) for x in layers), 53 + 2 * 53 + 2 * (8 + 3 + 4 + 1 + 1) + 2 * 4
    if arrays != expected:
        gaps.append(f"{arrays} weight arrays, not {expected}")
    return gaps


def _size(shape: list) -> int:
    n = 1
    for k in shape:
        n *= k
    return n
