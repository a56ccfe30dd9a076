"""--graph compiled and --precision bf16 on MXNet beyond the per-cell checks: static shapes reach every
hybridized block (nested ones through their outermost), a workload with variable shapes trains as standard
and says why, and bf16 (oneDNN's, CPU only in MXNet 1.9) is refused on a GPU in one sentence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mxnet as mx
import pytest

from tbdkit.adapters.mxnet_compile import StaticShapes, hybridized_roots


@dataclass
class Training:
    model: Any
    trainer: Any = None


def network() -> mx.gluon.Block:
    """A Block (not hybridizable) holding a hybridized part and one that is not."""

    class Net(mx.gluon.Block):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = mx.gluon.nn.HybridSequential()
            self.trunk.add(mx.gluon.nn.Dense(4), mx.gluon.nn.Dense(2))
            self.head = mx.gluon.nn.Dense(2)

        def forward(self, x):
            return self.head(self.trunk(x))

    net = Net()
    net.initialize()
    net.trunk.hybridize(static_alloc=True)
    return net


def test_static_shapes_reach_the_hybridized_blocks_where_shapes_are_fixed():
    net = network()
    assert hybridized_roots(Training(net).model) == [net.trunk]
    static = StaticShapes(Training(net), {"input_shapes": "fixed"})
    assert static.blocks == ["model: HybridSequential"] and static.record()["static_shape"] is True
    assert dict(net.trunk._flags)["static_shape"] and dict(net.trunk[0]._flags)["static_shape"]
    out = net(mx.nd.ones((3, 5)))
    assert out.shape == (3, 2)


def test_variable_shapes_train_as_standard_and_say_why():
    net = network()
    static = StaticShapes(Training(net), {"input_shapes": "variable"})
    assert static.record()["static_shape"] is None and "re-plan" in static.record()["reason"]
    assert not dict(net.trunk._flags).get("static_shape")


def test_bf16_on_a_gpu_is_refused_in_one_sentence():
    from tbdkit.adapters.mxnet import BF16_ON_GPU, Precision

    with pytest.raises(RuntimeError, match="runs only on the CPU") as err:
        Precision("bf16", on_gpu=True)
    assert str(err.value) == BF16_ON_GPU and "run --precision amp" in BF16_ON_GPU
