"""Seq2Seq across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of the reference sentence pair from the hyperparameters alone (2 per multiply-accumulate of the
    weight products; attention scores and contexts hold no weights, not counted)."""
    u, s = hp["num_units"], round(hp["length_mean"])
    t = round(s * hp["target_length_ratio"]) + 1  # decoder steps: <s> y (labels y </s>)
    encoder = 2 * s * (4 * u * u + 4 * u * u)  # two directions, input u
    keys = s * 2 * u * u  # memory layer
    decoder = t * ((4 * u * 2 * u + 4 * u * u) + (4 * u * u + 4 * u * u) + 3 * u * u + u * hp["target_vocab_size"])
    return 2 * (encoder + keys + decoder)


def network_gaps(described: dict, hp: dict) -> list[str]:
    """The canonical layer order (PyTorch's forward order)."""
    names = [x["name"] for x in described["pytorch"]["layers"]]
    expected = ["embedding1", "lstm1.forward", "lstm1.backward", "dense1", "embedding2", "lstm2", "lstm3", "dense2",
                "dense3", "scale1"]  # fmt: skip
    return [] if names == expected else [f"layers {names}, expected {expected}"]
