"""ViT-B/16 across its frameworks (tbdkit check-workload; tbdkit/bench/cross_framework.py reads this file)."""


def forward_flops(hp: dict) -> int:
    """Forward FLOPs of one image from the hyperparameters alone, 2 per multiply-accumulate of every weight product:
    the patch convolution at every patch, q, k, v, output and the MLP at every token (patches + the class token),
    the head at the class token."""
    d, p = hp["hidden_dim"], hp["patch_size"]
    patches = (hp["image_size"] // p) ** 2
    layer = 4 * d * d + 2 * d * hp["mlp_dim"]
    return 2 * (patches * 3 * p * p * d + (patches + 1) * hp["num_layers"] * layer + d * hp["num_classes"])


FLOPS_REL = 0  # exact: every product is a weight's
SAME_LAYER_KEYS = ("tied", "kind")
