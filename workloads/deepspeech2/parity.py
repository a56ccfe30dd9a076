"""DeepSpeech2 across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate)."""

    def out(n: int, k: int, s: int) -> int:
        return (n + 2 * (k // 2) - k) // s + 1

    frames = 1 + (round((hp["duration_typical_low_s"] + hp["duration_typical_high_s"]) / 2 * 16000) - 320) // 160
    (k1f, k1t), (k2f, k2t) = hp["conv1_kernel"], hp["conv2_kernel"]
    (s1f, s1t), (s2f, s2t) = hp["conv1_stride"], hp["conv2_stride"]
    c, f1, t1 = hp["conv_channels"], out(hp["frequency_bins"], k1f, s1f), out(frames, k1t, s1t)
    f2, t2 = out(f1, k2f, s2f), out(t1, k2t, s2t)
    macs = c * k1f * k1t * f1 * t1 + c * c * k2f * k2t * f2 * t2
    h, width = hp["rnn_hidden"], c * f2
    for _ in range(hp["rnn_layers"]):
        macs += 2 * t2 * (3 * h * width + 3 * h * h)
        width = 2 * h
    macs += t2 * (2 * h * hp["fc_hidden"] + hp["fc_hidden"] * len(hp["alphabet"]))
    return 2 * macs


def network_gaps(described: dict, hp: dict) -> list[str]:
    """The canonical layer order (PyTorch's forward order)."""
    names = [x["name"] for x in described["pytorch"]["layers"]]
    expected = ["conv1", "bn1", "conv2", "bn2", "gru1.forward", "gru1.backward", "gru2.forward", "gru2.backward",
                "dense1", "dense2"]  # fmt: skip
    return [] if names == expected else [f"layers {names}, expected {expected}"]
