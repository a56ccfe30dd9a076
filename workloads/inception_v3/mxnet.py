"""Inception-v3 on MXNet 1.9 Gluon: the network with its auxiliary classifier, RMSProp and one
training step.

The same network as pytorch.py (torchvision's inception_v3), written out in Gluon blocks: every
convolution with its batch norm, each Inception module's branches in torchvision's order, the
auxiliary head after Mixed_6e while recording for training (Gluon's model zoo inception_v3 has no
auxiliary head). Every size and rate comes from the hyperparameters handed in (workload.toml);
nothing here times, logs or profiles.
"""

from __future__ import annotations

from typing import Any

import mxnet as mx
from mxnet import autograd, gluon

from _shared import gluon_classifier as classifier

# the loss, the step and the batch layout are the shared classifier's (workloads/_shared)
to_device, forward, train_step = classifier.to_device, classifier.forward, classifier.train_step


def basic_conv(cin: int, channels: int, kernel: int | tuple[int, int], stride: int = 1, same: bool = False,
               std: float = 0.1) -> gluon.nn.HybridSequential:
    """torchvision's BasicConv2d: a bias-free convolution padded by none or half the kernel, batch
    norm (eps 0.001, momentum 0.1 in PyTorch's terms), ReLU."""
    k = (kernel, kernel) if isinstance(kernel, int) else kernel
    out = gluon.nn.HybridSequential(prefix="")
    out.add(gluon.nn.Conv2D(channels, k, stride, (k[0] // 2, k[1] // 2) if same else 0, use_bias=False,
                            in_channels=cin, weight_initializer=mx.init.Normal(std)))
    out.add(gluon.nn.BatchNorm(momentum=0.9, epsilon=0.001, in_channels=channels))
    out.add(gluon.nn.Activation("relu"))
    return out


def avg_pool() -> gluon.nn.AvgPool2D:
    """PyTorch's avg_pool2d(3, stride 1, padding 1): the zero padding counts in every average."""
    return gluon.nn.AvgPool2D(3, 1, 1, count_include_pad=True)


def max_pool() -> gluon.nn.MaxPool2D:
    return gluon.nn.MaxPool2D(3, 2)


def sequence(*blocks: gluon.HybridBlock) -> gluon.nn.HybridSequential:
    out = gluon.nn.HybridSequential(prefix="")
    out.add(*blocks)
    return out


class Branches(gluon.HybridBlock):
    """An Inception module (or InceptionE's 1x3 / 3x1 fork): branches run in order, concatenated on channels."""

    def __init__(self, *branches: gluon.HybridBlock, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.branches = gluon.nn.HybridSequential(prefix="")
        self.branches.add(*branches)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.concat(*[branch(x) for branch in self.branches], dim=1)


def inception_a(cin: int, pool_features: int) -> Branches:
    return Branches(basic_conv(cin, 64, 1),
                    sequence(basic_conv(cin, 48, 1), basic_conv(48, 64, 5, same=True)),
                    sequence(basic_conv(cin, 64, 1), basic_conv(64, 96, 3, same=True), basic_conv(96, 96, 3, same=True)),
                    sequence(avg_pool(), basic_conv(cin, pool_features, 1)))


def inception_b(cin: int) -> Branches:
    return Branches(basic_conv(cin, 384, 3, 2),
                    sequence(basic_conv(cin, 64, 1), basic_conv(64, 96, 3, same=True), basic_conv(96, 96, 3, 2)),
                    max_pool())


def inception_c(cin: int, c7: int) -> Branches:
    return Branches(basic_conv(cin, 192, 1),
                    sequence(basic_conv(cin, c7, 1), basic_conv(c7, c7, (1, 7), same=True),
                             basic_conv(c7, 192, (7, 1), same=True)),
                    sequence(basic_conv(cin, c7, 1), basic_conv(c7, c7, (7, 1), same=True),
                             basic_conv(c7, c7, (1, 7), same=True), basic_conv(c7, c7, (7, 1), same=True),
                             basic_conv(c7, 192, (1, 7), same=True)),
                    sequence(avg_pool(), basic_conv(cin, 192, 1)))


def inception_d(cin: int) -> Branches:
    return Branches(sequence(basic_conv(cin, 192, 1), basic_conv(192, 320, 3, 2)),
                    sequence(basic_conv(cin, 192, 1), basic_conv(192, 192, (1, 7), same=True),
                             basic_conv(192, 192, (7, 1), same=True), basic_conv(192, 192, 3, 2)),
                    max_pool())


def split(cin: int) -> Branches:
    return Branches(basic_conv(cin, 384, (1, 3), same=True), basic_conv(cin, 384, (3, 1), same=True))


def inception_e(cin: int) -> Branches:
    return Branches(basic_conv(cin, 320, 1),
                    sequence(basic_conv(cin, 384, 1), split(384)),
                    sequence(basic_conv(cin, 448, 1), basic_conv(448, 384, 3, same=True), split(384)),
                    sequence(avg_pool(), basic_conv(cin, 192, 1)))


class InceptionV3(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        classes = hp["num_classes"]
        with self.name_scope():
            self.features = sequence(
                basic_conv(3, 32, 3, 2), basic_conv(32, 32, 3), basic_conv(32, 64, 3, same=True), max_pool(),
                basic_conv(64, 80, 1), basic_conv(80, 192, 3), max_pool(),
                inception_a(192, 32), inception_a(256, 64), inception_a(288, 64), inception_b(288),
                inception_c(768, 128), inception_c(768, 160), inception_c(768, 160), inception_c(768, 192))
            self.aux = None
            if hp["aux_logits"]:  # torchvision's InceptionAux: 5x5/3 average pool, 1x1, 5x5, pool, dense
                self.aux = sequence(gluon.nn.AvgPool2D(5, 3), basic_conv(768, 128, 1),
                                    basic_conv(128, 768, 5, std=0.01), gluon.nn.GlobalAvgPool2D(),
                                    gluon.nn.Dense(classes, in_units=768, weight_initializer=mx.init.Normal(0.001)))
            self.tail = sequence(inception_d(768), inception_e(1280), inception_e(2048), gluon.nn.GlobalAvgPool2D(),
                                 gluon.nn.Dropout(hp["dropout"]))
            self.fc = gluon.nn.Dense(classes, in_units=2048, weight_initializer=mx.init.Normal(0.1))

    def hybrid_forward(self, F: Any, images: Any) -> Any:
        """Logits; (logits, aux_logits) while recording for training with the auxiliary head, as torchvision."""
        x = self.features(images)
        aux = self.aux(x) if self.aux is not None and autograd.is_training() else None
        logits = self.fc(self.tail(x))
        return (logits, aux) if aux is not None else logits


def build(hp: dict[str, Any], ctx: mx.Context) -> classifier.Training:
    """MXNet's RMSProp divides by sqrt(mean square + epsilon), PyTorch's by sqrt(mean square) +
    epsilon (workload.toml lists it); `wd` is coupled L2, as PyTorch's weight_decay."""
    model = InceptionV3(hp, prefix="inception_v3_")
    model.initialize(mx.init.Zero(), ctx=ctx)  # weights have their own initializers; BN gamma 1, biases 0
    for part in (model.features, model.aux, model.tail, model.fc):  # the top block stays imperative: the
        if part is not None:                                       # auxiliary head runs only while training
            part.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "rmsprop", {
        "learning_rate": hp["learning_rate"], "gamma1": hp["rmsprop_decay"], "epsilon": hp["rmsprop_epsilon"],
        "wd": hp["weight_decay"],
    })
    return classifier.Training(model, trainer, hp["num_classes"], hp["label_smoothing"],
                               hp["aux_loss_weight"] if hp["aux_logits"] else 0.0)
