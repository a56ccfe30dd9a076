"""Llama across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one sample (a sequence) from the hyperparameters alone, 2 per multiply-accumulate of every
    weight product: q, k, v (grouped: kv_heads x head), output and the three SwiGLU projections per layer and the
    output projection, at every token (the attention's own products are model FLOPs counted apart, analysis/peak)."""
    d, t = hp["hidden_size"], hp["seq_len"]
    kv = d // hp["num_attention_heads"] * hp["num_key_value_heads"]
    layer = 2 * d * d + 2 * d * kv + 3 * d * hp["intermediate_size"]
    return 2 * t * (hp["num_hidden_layers"] * layer + d * hp["vocab_size"])


FLOPS_REL = 0  # exact: every product is a weight's
SAME_LAYER_KEYS = ("tied", "kind")
