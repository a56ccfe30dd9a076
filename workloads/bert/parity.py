"""BERT across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one reference sample from the hyperparameters alone (2 per multiply-accumulate): every dense
    layer at every position; the pooler and next-sentence head once per sequence."""
    h, i, v, s = hp["hidden_size"], hp["intermediate_size"], hp["vocab_size"], hp["seq_len"]
    macs = s * hp["num_hidden_layers"] * (4 * h * h + 2 * h * i) + h * h + s * (h * h + h * v) + 2 * h
    return 2 * macs


def network_gaps(described: dict, hp: dict) -> list[str]:
    """In every framework: three embeddings and a layer norm first; the decoder's bias its own, its weight tied to
    the word embeddings."""
    gaps = []
    for fw, d in described.items():
        layers = d["layers"]
        if [x["kind"] for x in layers[:4]] != ["embedding"] * 3 + ["layernorm"]:
            gaps.append(f"{fw}'s first layers are {[x['kind'] for x in layers[:4]]}")
        if layers[-2]["params"] != {"bias": [2000]} or layers[-2].get("tied") != {"weight": [2000, 64]}:
            gaps.append(f"{fw}'s decoder holds {layers[-2]['params']}, tied {layers[-2].get('tied')}")
    return gaps
