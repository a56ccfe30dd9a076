"""The Transformer across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""

# the pre-softmax projection tied to the one embedding table in every framework
SAME_LAYER_KEYS = ("tied",)
FLOPS_REL = 0.0


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of the reference sentence pair from the hyperparameters alone: 2 per multiply-accumulate of
    every weight product (q, k, v, output and feed-forward dense layers; the tied pre-softmax projection);
    attention's scores and contexts hold no weights and are not counted."""
    d, f, v = hp["d_model"], hp["ffn_hidden"], hp["target_vocab_size"]
    s = round(hp["length_mean"])
    t = round(s * hp["target_length_ratio"]) + 1  # decoder positions: <s> y
    encoder = hp["encoder_layers"] * s * (4 * d * d + 2 * d * f)
    decoder = hp["decoder_layers"] * (t * 4 * d * d + t * 2 * d * d + s * 2 * d * d + t * 2 * d * f)
    return 2 * (encoder + decoder + t * d * v)


def network_gaps(described: dict, hp: dict) -> list[str]:
    """Per encoder layer: q, k, v, out, norm1, ffn 1 and 2, norm2; per decoder layer self-attention, norm1,
    cross-attention, norm2, ffn, norm3; the projection tied to the one embedding table last."""
    layers = described["pytorch"]["layers"]
    kinds = [x["kind"] for x in layers]
    encoder = ["dense"] * 4 + ["layernorm"] + ["dense"] * 2 + ["layernorm"]
    decoder = ["dense"] * 4 + ["layernorm"] + ["dense"] * 4 + ["layernorm"] + ["dense"] * 2 + ["layernorm"]
    expected = ["embedding"] + encoder * hp["encoder_layers"] + decoder * hp["decoder_layers"] + ["dense"]
    gaps = [] if kinds == expected else [f"layer kinds {kinds}, expected {expected}"]
    if layers[-1].get("tied") != {"weight": [hp["target_vocab_size"], hp["d_model"]]}:
        gaps.append(f"the last layer's tied weight is {layers[-1].get('tied')}, not the embedding table")
    return gaps
