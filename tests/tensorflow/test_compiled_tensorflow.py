"""--graph compiled and --precision bf16 on TensorFlow beyond the per-cell checks: a step XLA refuses trains
as standard and says why, an eager step says XLA has nothing to compile, each new input shape counts as a
compilation, and bf16 is refused on a GPU without bfloat16 tensor cores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import tensorflow as tf

from tbdkit.adapters.tensorflow_compile import NO_FUNCTION, XlaStep


@dataclass
class Training:
    step: Any
    counter: tf.Variable


def test_a_step_xla_refuses_trains_as_standard_and_says_why():
    counter = tf.Variable(0.0)

    @tf.function
    def step(x: tf.Tensor) -> tf.Tensor:
        counter.assign_add(1.0)
        # a string op has no XLA kernel: XLA refuses the function before running any of it
        return tf.strings.to_number(tf.strings.as_string(tf.reduce_sum(x)))

    training = Training(step, counter)
    xla = XlaStep(training)
    assert xla.active and xla.config()["functions"] == ["step"]
    got = xla.run(lambda: training.step(tf.ones((2, 3))))
    assert float(got) == 6.0 and float(counter.numpy()) == 1.0  # the refused call changed nothing, the rerun did
    assert not xla.active and training.step is step
    record = xla.record()
    assert record["xla"] is None and "XLA could not compile the step" in record["reason"]
    assert "trains as standard" in record["reason"]


def test_each_new_input_shape_is_one_xla_compilation():
    @tf.function(input_signature=[tf.TensorSpec((None, 3), tf.float32)])
    def step(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(x * x)

    training = Training(step, tf.Variable(0.0))
    xla = XlaStep(training)
    for rows in (2, 2, 5, 2, 7):
        assert float(xla.run(lambda: training.step(tf.ones((rows, 3))))) == rows * 3
    assert xla.compilations() == 3 and xla.record()["xla"] is True


def test_an_eager_step_gives_xla_nothing_to_compile():
    @dataclass
    class Eager:
        model: Any

    xla = XlaStep(Eager(model=None))
    assert not xla.active and xla.compilations() is None and xla.record()["reason"] == NO_FUNCTION


def test_bf16_on_a_gpu_without_bfloat16_is_refused_in_one_sentence():
    from tbdkit.adapters.tensorflow import Precision

    v100 = {"device_name": "Tesla V100-SXM2-16GB", "compute_capability": (7, 0)}  # get_device_details' answer
    with pytest.raises(RuntimeError, match=r"Tesla V100-SXM2-16GB is 7\.0: run --precision amp"):
        Precision("bf16", True, v100)
    try:
        cpu = Precision("bf16", False)
        assert cpu.describe()["keras_dtype_policy"] == "mixed_bfloat16" and cpu.describe()["loss_scaling"] is False
    finally:
        Precision("fp32", False)
