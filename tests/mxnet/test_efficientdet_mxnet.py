"""EfficientDet-D0 on MXNet: effdet's network written out in Gluon (sizes, TF "same" padding, stochastic
depth), its anchors and target assignment against tensorflow.py's rules, the loss against a NumPy
reference, the adapter's fusion and depthwise layers, and a smoke step that learns. Runs in the MXNet
stack; parity with PyTorch's network is tests/test_efficientdet_frameworks.py."""

import math

import mxnet as mx
import numpy as np
import pytest

from tbdkit.spec import catalog
from model_checks import adapter as stack_adapter

MODEL = catalog.get("efficientdet")
WORKLOAD = catalog.load_module(MODEL, "mxnet")
DATA = catalog.load_module(MODEL, "data")
HP = MODEL.hp("smoke")


@pytest.fixture(scope="module")
def adapter():
    return stack_adapter("efficientdet", "mxnet")


def test_batch_norm_state_and_output_sizes_are_effdets(adapter):
    a = adapter
    assert a.model_info()["non_trainable_state"] == 47_136  # running mean and variance of 108 batch norms
    size = HP["image_size"]
    out = WORKLOAD.forward(a.training, a.prepare(next(DATA.synthetic_batches(HP, 1, seed=0))))
    anchors = sum((size // 2 ** level) ** 2 * 9 for level in range(3, 8))
    assert out["class_logits"].shape == (1, anchors, 90)
    assert out["box_outputs"].shape == (1, anchors, 4)
    # effdet's prior: every class starts at probability 0.01
    bias = a.training.model.class_net.predict[-1].bias.data().asnumpy()
    np.testing.assert_allclose(bias, np.log(0.01 / 0.99), rtol=1e-6)


def test_batch_norm_momentum_is_pytorchs_converted():
    """PyTorch's momentum (new statistics' weight) 0.1 in the backbone and 0.01 in the FPN and heads is
    MXNet's 0.9 and 0.99 (old statistics' weight); eps 1e-3 everywhere."""
    model = WORKLOAD.EfficientDet(HP)
    norms = []
    model.apply(lambda b: norms.append(b) if isinstance(b, mx.gluon.nn.BatchNorm) else None)
    assert len(norms) == 108
    (stem_bn,) = [b for b in model.stem if isinstance(b, mx.gluon.nn.BatchNorm)]
    head_bn = model.class_net.norms[0][0]
    assert (stem_bn._kwargs["momentum"], head_bn._kwargs["momentum"]) == pytest.approx((0.9, 0.99))
    assert {b._kwargs["eps"] for b in norms} == {1e-3}


@pytest.mark.parametrize("size, kernel, stride, pads", [
    (256, 3, 2, (0, 1)), (64, 5, 2, (1, 2)), (16, 3, 1, (1, 1)), (15, 3, 2, (1, 1)), (4, 3, 2, (0, 1))])
def test_same_padding_is_tfs(size, kernel, stride, pads):
    """TF's "same": out = ceil(size / stride), the odd pad after; an asymmetric pad becomes an explicit Pad."""
    assert WORKLOAD.same_pads(size, kernel, stride) == pads
    out = mx.gluon.nn.HybridSequential()
    assert WORKLOAD.conv(out, 2, 2, size, kernel, stride) == math.ceil(size / stride)
    assert isinstance(out[0], WORKLOAD.Pad) == (pads[0] != pads[1])
    out.initialize()
    assert out(mx.nd.ones((1, 2, size, size))).shape == (1, 2, math.ceil(size / stride), math.ceil(size / stride))


def test_max_pooling_pads_with_minus_infinity():
    """timm's MaxPool2dSame: the pad never wins, even over negative maps."""
    out = mx.gluon.nn.HybridSequential()
    assert WORKLOAD.max_pool(out, 4) == 2
    x = -mx.nd.arange(1, 17).reshape((1, 1, 4, 4))
    np.testing.assert_array_equal(out(x).asnumpy()[0, 0], [[-1, -3], [-9, -11]])


def test_stochastic_depth_drops_whole_samples_in_training_only():
    block = WORKLOAD.Block("ir", 8, 8, 4, 3, 1, 2, drop=0.5)
    block.initialize()
    x = mx.nd.random.normal(shape=(64, 8, 4, 4))
    with mx.autograd.record(train_mode=False):
        inference = block(x)
    with mx.autograd.record(train_mode=True):
        trained = block(x)
    body = block.body(x)  # inference-mode body: the batch norms on their running statistics
    np.testing.assert_allclose(inference.asnumpy(), (body + x).asnumpy(), rtol=1e-5, atol=1e-6)
    # each sample's residual is dropped or kept whole: (trained - x) is zero or nonzero over a sample
    residual = np.abs((trained - x).asnumpy()).reshape(64, -1)
    dropped = residual.max(axis=1) == 0
    assert 8 < dropped.sum() < 56 and (residual[~dropped] > 0).mean() > 0.9


def test_anchors_and_labels_are_effdets_layout():
    """Anchors level, location, octave, aspect; labels 0-based with -1 background (checked against effdet's
    own AnchorLabeler in tests/test_efficientdet_frameworks.py)."""
    anchors = WORKLOAD.anchor_boxes(256)
    assert anchors.shape == (12276, 4)
    np.testing.assert_allclose(anchors[0], [4 - 16, 4 - 16, 4 + 16, 4 + 16])
    np.testing.assert_allclose(anchors[9], [4 - 16, 12 - 16, 4 + 16, 12 + 16])  # the next location (x + 8)
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 200, (4, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(8, 60, (4, 2))], 1).astype(np.float32)
    cls, box, positives = WORKLOAD.label_anchors(anchors, boxes, np.array([3, 90, 1, 17]))
    assert positives >= 4 and set(np.unique(cls)) <= {-1, 2, 89, 0, 16} and (box[cls == -1] == 0).all()


def test_loss_matches_a_numpy_reference():
    """effdet's focal loss (alpha 0.25, gamma 1.5) over non-ignored anchors plus 50 x Huber (delta 0.1)
    over nonzero box targets, both over positives + 1 (the box part also over 4)."""
    rng = np.random.default_rng(1)
    classes, n, levels = 5, 2, [(2, 2), (1, 1)]
    class_out = [rng.normal(size=(n, 9 * classes, h, w)).astype(np.float32) for h, w in levels]
    box_out = [rng.normal(scale=0.2, size=(n, 36, h, w)).astype(np.float32) for h, w in levels]
    anchors = 9 * 5
    cls = rng.integers(-2, classes, size=(n, anchors))
    box = np.where(rng.random((n, anchors, 1)) < 0.3, rng.normal(scale=0.2, size=(n, anchors, 4)), 0).astype(np.float32)
    loss = WORKLOAD.detection_loss([mx.nd.array(c) for c in class_out], [mx.nd.array(b) for b in box_out],
                                   mx.nd.array(cls, dtype="int64"), mx.nd.array(box), 7.0, classes).asscalar()

    def flat(outs, width):
        return np.concatenate([o.transpose(0, 2, 3, 1).reshape(n, -1, width) for o in outs], axis=1).astype(np.float64)
    x, b = flat(class_out, classes), flat(box_out, 4)
    t = np.eye(classes)[np.maximum(cls, 0)] * (cls >= 0)[..., None]
    p = 1 / (1 + np.exp(-x))
    pt = t * p + (1 - t) * (1 - p)
    ce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    focal = (t * 0.25 + (1 - t) * 0.75) * (1 - pt) ** 1.5 * ce * (cls != -2)[..., None]
    err = np.abs(b - box)
    huber = np.where(err <= 0.1, 0.5 * err ** 2, 0.1 * err - 0.5 * 0.01) * (box != 0)
    np.testing.assert_allclose(loss, focal.sum() / 8 + 50 * huber.sum() / 32, rtol=1e-5)


def test_depthwise_convolution_has_pytorchs_grouped_layout():
    """A Gluon Conv2D with groups = channels is listed as PyTorch's Conv2d(groups=C): weight (C, 1, kh, kw),
    its output positions counted; assigning the canonical weight back round-trips."""
    from tbdkit.describe.mxnet import canonical_layers

    model = mx.gluon.nn.HybridSequential()
    model.add(mx.gluon.nn.Conv2D(6, 3, 2, 1, groups=3, use_bias=False, in_channels=3))
    model.initialize()
    x = mx.nd.random.normal(shape=(1, 3, 8, 8))
    (canon,) = canonical_layers(model, lambda: model(x))
    assert (canon.kind, canon.params["weight"].shape, canon.positions) == ("conv2d", (6, 1, 3, 3), 16)
    weight = np.arange(54, dtype=np.float32).reshape(6, 1, 3, 3)
    canon.assign({"weight": weight})
    (back,) = canonical_layers(model, lambda: model(x))
    np.testing.assert_array_equal(back.params["weight"], weight)
    assert canon.flops() == 2 * 54 * 16


def test_fusion_weights_are_a_canonical_layer():
    """BiFPN's fast normalized fusion: sum relu(w_i) x_i / (sum relu(w_i) + 1e-4), listed as a "fusion" layer."""
    from tbdkit.describe.mxnet import canonical_layers

    class Holder(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.fuse = WORKLOAD.Fuse(3)

        def hybrid_forward(self, F, *xs):
            return self.fuse(*xs)

    model = Holder()
    model.initialize()
    xs = [mx.nd.full((1, 1, 2, 2), v) for v in (1.0, 2.0, 4.0)]
    (canon,) = canonical_layers(model, lambda: model(*xs))
    assert (canon.kind, canon.params["weights"].tolist(), canon.flops()) == ("fusion", [1.0, 1.0, 1.0], 0)
    canon.assign({"weights": np.array([2.0, -1.0, 1.0], np.float32)})  # relu drops the negative one
    np.testing.assert_allclose(model(*xs).asnumpy(), (2 * 1.0 + 4.0) / (3.0 + 1e-4), rtol=1e-6)
