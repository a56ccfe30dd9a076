"""MiniGo across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""
    n, w, planes = hp["board_size"], hp["conv_width"], 2 * hp["history"] + 1
    pw, vw, fc = hp["policy_conv_width"], hp["value_conv_width"], hp["fc_width"]
    macs = n * n * (planes * w * 9 + hp["trunk_layers"] * 2 * w * w * 9 + w * (pw + vw))
    macs += pw * n * n * (n * n + 1) + vw * n * n * fc + fc
    return 2 * macs


def network_gaps(described: dict, hp: dict) -> list[str]:
    """The canonical layer order in every framework; the heads' batch norms have no scale or offset."""
    names = ["conv1", "bn1"] + [f"{k}{i}" for i in range(2, 20) for k in ("conv", "bn")]
    names += ["conv20", "bn20", "dense1", "conv21", "bn21", "dense2", "dense3"]
    gaps = []
    for fw, d in described.items():
        layers = d["layers"]
        if [x["name"] for x in layers] != names:
            gaps.append(f"{fw}'s layers {[x['name'] for x in layers]}, expected {names}")
        elif layers[-6]["params"] != {} or layers[-3]["params"] != {}:
            gaps.append(f"{fw}'s heads' batch norms hold {layers[-6]['params']} and {layers[-3]['params']}")
    return gaps
