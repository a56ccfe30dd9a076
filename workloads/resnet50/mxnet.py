"""ResNet-50 v1.5 on MXNet 1.9 Gluon: the network, SGD with momentum and one training step.

The same network as pytorch.py (torchvision's resnet50), built here because Gluon's model zoo
resnet50_v1 puts the stride of a downsampling bottleneck on its first 1x1 convolution (v1) and
resnet50_v2 is pre-activation: v1.5 strides the 3x3. Each block runs its residual path before its
projection shortcut, as torchvision does. Every size and rate comes from the hyperparameters
handed in (workload.toml); nothing here times, logs or profiles.
"""

from __future__ import annotations

from typing import Any

import mxnet as mx
from mxnet import gluon

from _shared import gluon_classifier as classifier
from _shared import gluon_resnet as resnet

# the loss, the step and the batch layout are the shared classifier's (workloads/_shared)
to_device, forward, train_step, targets = (classifier.to_device, classifier.forward, classifier.train_step,
                                          classifier.targets)


class ResNet50(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = gluon.nn.HybridSequential(prefix="")
            with self.features.name_scope():
                channels = resnet.add_stem(self.features)
                for stage in range(len(resnet.WIDTHS)):
                    channels = resnet.add_stage(self.features, "resnet50", stage, channels)
                self.features.add(gluon.nn.GlobalAvgPool2D())
            self.fc = gluon.nn.Dense(hp["num_classes"], in_units=channels, prefix="fc_")

    def hybrid_forward(self, F: Any, images: Any) -> Any:
        return self.fc(self.features(images))


def initialize(model: gluon.HybridBlock, ctx: mx.Context) -> None:
    """Kaiming-normal weights (fan out, ReLU gain) as torchvision's convolutions; BN gamma 1, biases 0."""
    model.initialize(mx.init.MSRAPrelu(factor_type="out", slope=0.0), ctx=ctx)
    model.hybridize(static_alloc=True)


def build(hp: dict[str, Any], ctx: mx.Context) -> classifier.Training:
    model = ResNet50(hp, prefix="resnet50_")
    initialize(model, ctx)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": hp["learning_rate"], "momentum": hp["momentum"],
        "wd": hp["weight_decay"],  # coupled L2 (grad + wd x weight), as PyTorch's SGD
    })
    return classifier.Training(model, trainer, hp["num_classes"], hp["label_smoothing"])
