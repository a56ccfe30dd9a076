"""A3C across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""

    def out(n: int, k: int, s: int) -> int:
        return (n - k) // s + 1

    h1, w1 = (out(hp[f"frame_{d}"], hp["conv1_kernel"], hp["conv1_stride"]) for d in ("height", "width"))
    h2, w2 = out(h1, hp["conv2_kernel"], hp["conv2_stride"]), out(w1, hp["conv2_kernel"], hp["conv2_stride"])
    macs = hp["conv1_channels"] * hp["frame_stack"] * hp["conv1_kernel"] ** 2 * h1 * w1
    macs += hp["conv2_channels"] * hp["conv1_channels"] * hp["conv2_kernel"] ** 2 * h2 * w2
    macs += hp["conv2_channels"] * h2 * w2 * hp["hidden"] + hp["hidden"] * (hp["actions"] + 1)
    return 2 * macs


def network_gaps(described: dict, hp: dict) -> list[str]:
    """The canonical layer order in every framework; 677,943 parameters; no non-trainable state."""
    gaps = [f"{fw}'s layers {names}" for fw, d in described.items()
            if (names := [x["name"] for x in d["layers"]]) != ["conv1", "conv2", "dense1", "dense2", "dense3"]]
    gaps += [f"{fw} holds {d['framework_state']['non_trainable_state']} non-trainable values" for fw, d in
             described.items() if d["framework_state"]["non_trainable_state"] != 0]  # fmt: skip
    if described["pytorch"]["parameters"] != 677_943:
        gaps.append(f"{described['pytorch']['parameters']:,} parameters, not 677,943")
    return gaps
