"""EfficientDet-D0 across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""

# every framework applies each layer at the same output positions
SAME_LAYER_KEYS = ("positions_per_sample",)
FLOPS_REL = 0.0


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one 256x256 sample: effdet D0's 2.5 G multiply-adds at 512 px (Tan et al. Table 2) x
    (256 / 512)^2, 2 FLOPs each."""
    return 1_247_106_560


def network_gaps(described: dict, hp: dict) -> list[str]:
    """effdet's 3,880,067 parameters; in every framework the 24 BiFPN nodes' fusion weights (2 or 3 inputs) listed
    as layers."""
    gaps = []
    if described["pytorch"]["parameters"] != 3_880_067:
        gaps.append(f"{described['pytorch']['parameters']:,} parameters, effdet's 3,880,067")
    for framework, d in described.items():
        fusion = [x["params"]["weights"] for x in d["layers"] if x["kind"] == "fusion"]
        if fusion != [[2], [2], [2], [2], [3], [3], [3], [2]] * 3:
            gaps.append(f"{framework}'s fusion weights {fusion} are not the 3 BiFPN layers' 8 nodes")
    return gaps
