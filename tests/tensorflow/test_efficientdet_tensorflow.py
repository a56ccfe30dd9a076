"""EfficientDet-D0 on TensorFlow: effdet's network written out in Keras (sizes), its anchors and target
assignment against a plain NumPy reference, and a smoke step that learns. Runs in the TensorFlow stack;
parity with PyTorch's network is tests/test_efficientdet_frameworks.py."""

import numpy as np

from tbdkit.spec import catalog
from model_checks import kept_learning_run

MODEL = catalog.get("efficientdet")
WORKLOAD = catalog.load_module(MODEL, "tensorflow")
DATA = catalog.load_module(MODEL, "data")


# the learning check's network (smoke preset; its steps on a fixed batch): building and tracing it is most of the
# unit's time, so this file reads the one the generated tests train
run = kept_learning_run("efficientdet", "tensorflow")


def test_output_sizes_are_effdets(run):
    a = run.trained
    size = MODEL.hp("smoke")["image_size"]
    out = WORKLOAD.forward(a.training, a.prepare(next(DATA.synthetic_batches(MODEL.hp("smoke"), 1, seed=0))))
    anchors = sum((size // 2 ** level) ** 2 * 9 for level in range(3, 8))
    assert out["class_logits"].shape == (1, anchors, 90)
    assert out["box_outputs"].shape == (1, anchors, 4)
    # effdet's prior: every class starts at probability 0.01 (the bias before the learning check's first step)
    bias = a.training.model.class_net.predict[1].bias
    np.testing.assert_allclose(run.initial[bias.path], np.log(0.01 / 0.99), rtol=1e-6)


def test_anchors_are_effdets_layout():
    anchors = WORKLOAD.anchor_boxes(256)
    assert anchors.shape == (12276, 4)
    # P3's first location: octave 0 aspect 1:1 is 32 px wide around (4, 4); then the 1.4 x 0.7 aspect
    np.testing.assert_allclose(anchors[0], [4 - 16, 4 - 16, 4 + 16, 4 + 16])
    np.testing.assert_allclose(anchors[1], [4 - 0.7 * 16, 4 - 1.4 * 16, 4 + 0.7 * 16, 4 + 1.4 * 16], rtol=1e-6)
    np.testing.assert_allclose(anchors[9], [4 - 16, 12 - 16, 4 + 16, 12 + 16])  # the next location (x + 8)


def reference_labels(anchors, boxes, classes):
    """A loop-by-loop reading of effdet's ArgMaxMatcher (0.5, forced best anchor per box) and FasterRcnnBoxCoder."""
    def iou(a, b):
        ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = ih * iw
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if inter > 0 else 0.0
    table = np.array([[iou(g, a) for a in anchors] for g in boxes])
    match = [int(np.argmax(table[:, j])) if table[:, j].max() >= 0.5 else -1 for j in range(len(anchors))]
    for i in range(len(boxes)):
        match[int(np.argmax(table[i]))] = i
    cls = np.array([classes[m] - 1 if m >= 0 else -1 for m in match])
    box = np.zeros((len(anchors), 4))
    for j, m in enumerate(match):
        if m < 0:
            continue
        g, a = boxes[m], anchors[j]
        ha, wa, h, w = a[2] - a[0], a[3] - a[1], g[2] - g[0], g[3] - g[1]
        box[j] = [((g[0] + g[2]) - (a[0] + a[2])) / 2 / ha, ((g[1] + g[3]) - (a[1] + a[3])) / 2 / wa,
                  np.log(h / ha), np.log(w / wa)]
    return cls, box, sum(m >= 0 for m in match)


def test_target_assignment_matches_a_numpy_reference():
    anchors = WORKLOAD.anchor_boxes(128)
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 100, size=(5, 2))
    sizes = rng.uniform(8, 60, size=(5, 2))
    boxes = np.concatenate([corners, corners + sizes], axis=1).astype(np.float32)
    classes = np.array([3, 90, 1, 17, 5])
    padded_boxes = np.concatenate([boxes, -np.ones((2, 4), np.float32)])  # padding rows, class -1, are dropped
    padded_classes = np.concatenate([classes, [-1, -1]])
    cls, box, positives = WORKLOAD.label_anchors(anchors, padded_boxes, padded_classes)
    ref_cls, ref_box, ref_positives = reference_labels(anchors.astype(np.float64), boxes.astype(np.float64), classes)
    np.testing.assert_array_equal(cls, ref_cls)
    np.testing.assert_allclose(box, ref_box, rtol=1e-4, atol=1e-5)
    assert positives == ref_positives >= 5
    empty_cls, empty_box, none = WORKLOAD.label_anchors(anchors, np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    assert none == 0 and (empty_cls == -1).all() and not empty_box.any()


def test_depthwise_convolution_has_pytorchs_grouped_layout():
    """A keras DepthwiseConv2D is listed as PyTorch's Conv2d(groups=C): weight (C x M, 1, kh, kw), its
    output positions counted; assigning the canonical weight back round-trips."""
    import keras
    import tensorflow as tf
    from tbdkit.describe.tensorflow import canonical_layers

    layer = keras.layers.DepthwiseConv2D(3, 2, padding="same", depth_multiplier=2, use_bias=False)
    x = tf.constant(np.random.default_rng(0).normal(size=(1, 8, 8, 3)).astype(np.float32))
    model = keras.Sequential([layer])
    model(x)
    (canon,) = canonical_layers(model, lambda: model(x))
    assert (canon.kind, canon.params["weight"].shape, canon.positions) == ("conv2d", (6, 1, 3, 3), 16)
    kernel = layer.kernel.numpy()  # (kh, kw, C, M): output channel c x M + m
    np.testing.assert_array_equal(canon.params["weight"][2 * 1 + 1, 0], kernel[:, :, 1, 1])
    weight = np.arange(54, dtype=np.float32).reshape(6, 1, 3, 3)
    canon.assign({"weight": weight})
    (back,) = canonical_layers(model, lambda: model(x))
    np.testing.assert_array_equal(back.params["weight"], weight)
    assert canon.flops() == 2 * 54 * 16  # 9 multiply-adds per output value


def test_fusion_weights_are_a_canonical_layer():
    """BiFPN's fast normalized fusion: sum relu(w_i) x_i / (sum relu(w_i) + 1e-4), listed as a "fusion" layer."""
    import keras
    import tensorflow as tf
    from tbdkit.describe.tensorflow import canonical_layers

    class Holder(keras.Model):
        def __init__(self):
            super().__init__()
            self.fuse = WORKLOAD.Fuse(3)

        def call(self, xs):
            return self.fuse(xs)

    model = Holder()
    xs = [tf.fill((1, 2, 2, 1), v) for v in (1.0, 2.0, 4.0)]
    model(xs)
    (canon,) = canonical_layers(model, lambda: model(xs))
    assert (canon.kind, canon.params["weights"].tolist(), canon.flops()) == ("fusion", [1.0, 1.0, 1.0], 0)
    canon.assign({"weights": np.array([2.0, -1.0, 1.0], np.float32)})  # relu drops the negative one
    np.testing.assert_allclose(model(xs).numpy(), (2 * 1.0 + 4.0) / (3.0 + 1e-4), rtol=1e-6)
