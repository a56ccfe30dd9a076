"""Faster R-CNN across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of the smoke reference image (500x375, resized to 341x256, padded to 352x256) as every
    framework's training-mode forward pass runs it: 2 per multiply-accumulate of every convolution and dense layer
    at the positions the pass produced. The detector head runs on exactly roi_batch_size (16) sampled RoIs, as in
    training, so the count does not depend on how many proposals survive NMS; conv5 runs once per RoI (16 x 7x7):
    ResNet-18's conv5 is 411 M multiply-accumulates per 7x7 RoI map, so the head alone is 13.15 GFLOPs of the 18.6."""
    return 18_616_025_088


def network_gaps(described: dict, hp: dict) -> list[str]:
    """conv1-conv4 (ResNet-18: conv1, 4 convolutions in conv2, 5 in conv3 and conv4, the last two with their
    projection shortcut; each with its batch norm), the RPN head's three convolutions, conv5 (5 convolutions) and
    the predictor's two dense layers, in PyTorch's forward order; 23 convolutions (the RPN head's 3 with biases),
    20 batch norms (gamma, beta) and 2 dense layers (weight, bias): the weights every framework exchanges."""
    layers = described["pytorch"]["layers"]
    kinds = [x["kind"] for x in layers]
    gaps = []
    if kinds.count("conv2d") != 15 + 3 + 5 or kinds.count("batchnorm") != 15 + 5:
        gaps.append(f"{kinds.count('conv2d')} convolutions and {kinds.count('batchnorm')} batch norms, not 23 and 20")
    if kinds[-2:] != ["dense", "dense"] or kinds[30:33] != ["conv2d"] * 3:
        gaps.append(f"layer kinds {kinds} do not end in two dense layers with the RPN head at 30-32")
    arrays = sum(len(x["params"]) for x in layers)
    if arrays != 23 + 3 + 2 * 20 + 2 * 2:
        gaps.append(f"{arrays} weight arrays, not {23 + 3 + 2 * 20 + 2 * 2}")
    return gaps
