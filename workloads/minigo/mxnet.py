"""MiniGo on MXNet 1.9 Gluon: the residual policy/value network of minigo's dual_net.py, SGD with
momentum and L2 on the kernels, and one training step on a batch of positions.

The same network as pytorch.py, from the same hyperparameters (workload.toml). The heads' batch
norms have no scale or offset (dual_net's `center=False, scale=False`): Gluon keeps their gamma
and beta as fixed state (grad_req 'null'). Nothing here times, logs or profiles.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def _conv_bn(block: gluon.nn.HybridSequential, hp: dict[str, Any], cin: int, cout: int, kernel: int,
             affine: bool = True) -> None:
    block.add(gluon.nn.Conv2D(cout, kernel, padding=kernel // 2, use_bias=False, in_channels=cin),
              gluon.nn.BatchNorm(momentum=hp["batchnorm_momentum"], epsilon=hp["batchnorm_epsilon"],
                                 center=affine, scale=affine, in_channels=cout))


class Residual(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        w = hp["conv_width"]
        with self.name_scope():
            self.inner = gluon.nn.HybridSequential()
            with self.inner.name_scope():
                _conv_bn(self.inner, hp, w, w, 3)
                self.inner.add(gluon.nn.Activation("relu"))
                _conv_bn(self.inner, hp, w, w, 3)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.relu(x + self.inner(x))


class DualNet(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        n, w = hp["board_size"], hp["conv_width"]
        pw, vw = hp["policy_conv_width"], hp["value_conv_width"]
        with self.name_scope():
            self.trunk = gluon.nn.HybridSequential(prefix="trunk_")
            with self.trunk.name_scope():
                _conv_bn(self.trunk, hp, 2 * hp["history"] + 1, w, 3)
                self.trunk.add(gluon.nn.Activation("relu"))
                for i in range(hp["trunk_layers"]):
                    self.trunk.add(Residual(hp, prefix=f"res{i}_"))
            # Dense(flatten=True) reads (N, C, H, W) in C, H, W order, as PyTorch's Flatten does
            self.policy = gluon.nn.HybridSequential(prefix="policy_")
            with self.policy.name_scope():
                _conv_bn(self.policy, hp, w, pw, 1, affine=False)
                self.policy.add(gluon.nn.Activation("relu"), gluon.nn.Dense(n * n + 1, in_units=pw * n * n))
            self.value = gluon.nn.HybridSequential(prefix="value_")
            with self.value.name_scope():
                _conv_bn(self.value, hp, w, vw, 1, affine=False)
                self.value.add(gluon.nn.Activation("relu"),
                               gluon.nn.Dense(hp["fc_width"], activation="relu", in_units=vw * n * n),
                               gluon.nn.Dense(1, activation="tanh", in_units=hp["fc_width"]))

    def hybrid_forward(self, F: Any, planes: Any) -> tuple[Any, Any]:
        """Planes (N, 17, n, n) -> policy logits (N, n*n + 1), values (N,) in [-1, 1]."""
        x = self.trunk(planes)
        return self.policy(x), F.reshape(self.value(x), (-1,))


@dataclass
class Training:
    model: DualNet
    trainer: gluon.Trainer
    hp: dict[str, Any]
    kernels: list[Any] = field(default_factory=list)  # conv and dense weights: the L2 term's
    steps: int = 0


def learning_rate(hp: dict[str, Any], step: int) -> float:
    """rates[i] once step >= boundaries[i - 1] (PyTorch's LambdaLR schedule, stepped after each update)."""
    return float(hp["lr_rates"][bisect.bisect_right(hp["lr_boundaries"], step)])


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = DualNet(hp, prefix="minigo_")
    model.initialize(mx.init.Xavier(), ctx=ctx)
    model.hybridize(static_alloc=True)
    trainer = gluon.Trainer(model.collect_params(), "sgd", {
        "learning_rate": learning_rate(hp, 0), "momentum": hp["sgd_momentum"], "wd": 0.0})
    kernels = [p for name, p in model.collect_params().items() if name.endswith("_weight")]
    return Training(model, trainer, hp, kernels)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    return {"features": mx.nd.array(batch.features, ctx=ctx), "moves": mx.nd.array(batch.moves, ctx=ctx),
            "values": mx.nd.array(batch.values, ctx=ctx)}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone in inference mode (no loss, no update): logits and values, as NumPy."""
    logits, values = training.model(inputs["features"])
    return {"logits": logits.asnumpy(), "values": values.asnumpy()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One SGD step on policy cross-entropy + value MSE + L2 (the learning rate on its schedule)."""
    hp, trainer = training.hp, training.trainer
    with autograd.record():
        logits, value = training.model(inputs["features"])
        logits, value = logits.astype("float32"), value.astype("float32")
        policy_cost = -mx.nd.pick(mx.nd.log_softmax(logits, axis=-1), inputs["moves"], axis=-1).mean()
        value_cost = ((value - inputs["values"]) ** 2).mean()
        l2 = mx.nd.add_n(*[(p.data().astype("float32") ** 2).sum() for p in training.kernels])
        loss = policy_cost + hp["value_cost_weight"] * value_cost + hp["l2_strength"] * l2
        with precision.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    trainer.set_learning_rate(learning_rate(hp, training.steps))
    trainer.step(1)  # the loss is already a batch mean
    training.steps += 1
    return loss
