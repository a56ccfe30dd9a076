"""Seq2Seq (the NMT tutorial's attention model) on TensorFlow 2 / Keras 3: the network, its
optimizer and one training step.

The same network as pytorch.py, from the same hyperparameters (workload.toml): a bidirectional
LSTM encoder whose final states start the 2-layer decoder, scaled Luong attention with input
feeding, summed cross-entropy / batch size, SGD with the global gradient norm clipped and the
"luong234" decay. The LSTM cell is written out (gates i, f, g, o) with two bias vectors, input
and hidden, as PyTorch's and MXNet's cells have, so the three networks have the same parameters.
Nothing here times, logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update


def _check(hp: dict[str, Any]) -> None:
    wanted = {"encoder_type": "bi", "encoder_layers": 2, "decoder_layers": 2, "unit_type": "lstm",
              "attention": "scaled_luong", "output_attention": True, "residual": False}
    wrong = {k: hp[k] for k, v in wanted.items() if hp[k] != v}
    if wrong:
        raise ValueError(f"this implementation builds the tutorial's IWSLT15 architecture {wanted}; got {wrong}")


class LSTMCell(keras.layers.Layer):
    """An LSTM cell with PyTorch's parameters: kernels (in, 4H) and (H, 4H), gates i, f, g, o, and
    separate input and hidden biases; forget_bias is added to the input bias's forget block at init."""

    def __init__(self, units: int, init_weight: float, forget_bias: float, direction: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units, self.init_weight, self.forget_bias = units, init_weight, forget_bias
        self.direction = direction  # "forward" / "backward" for a half of a bidirectional layer
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape: Any) -> None:
        u, w = self.units, self.init_weight

        def uniform() -> keras.initializers.Initializer:  # one per weight: one instance repeats its draw
            return keras.initializers.RandomUniform(-w, w)

        bias_draw = uniform()

        def with_forget_bias(shape: Any, dtype: Any = None) -> Any:
            return bias_draw(shape, dtype) + np.concatenate([np.zeros(u), np.full(u, self.forget_bias),
                                                           np.zeros(2 * u)]).astype(np.float32)

        self.kernel = self.add_weight(shape=(input_shape[-1], 4 * u), initializer=uniform(), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(u, 4 * u), initializer=uniform(), name="recurrent_kernel")
        self.bias_input = self.add_weight(shape=(4 * u,), initializer=with_forget_bias, name="bias_input")
        self.bias_hidden = self.add_weight(shape=(4 * u,), initializer=uniform(), name="bias_hidden")
        self.built = True

    def call(self, inputs: tf.Tensor, states: Any, training: bool = False) -> tuple[tf.Tensor, list[tf.Tensor]]:
        h, c = states[0], states[1]
        z = (tf.matmul(inputs, self.kernel) + self.bias_input
             + tf.matmul(h, self.recurrent_kernel) + self.bias_hidden)
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, [h, c]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units, "init_weight": self.init_weight,
                "forget_bias": self.forget_bias, "direction": self.direction}


class Seq2Seq(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="seq2seq")
        _check(hp)
        u, w = hp["num_units"], hp["init_weight"]
        self.units = u

        def uniform() -> keras.initializers.Initializer:  # one per weight: one instance repeats its draw
            return keras.initializers.RandomUniform(-w, w)

        def cell(direction: str | None = None) -> LSTMCell:
            return LSTMCell(u, w, hp["forget_bias"], direction)

        self.source_embed = keras.layers.Embedding(hp["source_vocab_size"], u, embeddings_initializer=uniform())
        self.target_embed = keras.layers.Embedding(hp["target_vocab_size"], u, embeddings_initializer=uniform())
        self.dropout = keras.layers.Dropout(hp["dropout"])
        self.encoder_fwd = keras.layers.RNN(cell("forward"), return_sequences=True, return_state=True)
        self.encoder_bwd = keras.layers.RNN(cell("backward"), return_sequences=True, return_state=True,
                                            go_backwards=True)
        self.memory_layer = keras.layers.Dense(u, use_bias=False, kernel_initializer=uniform())
        self.cells = [cell(), cell()]  # input feeding: layer 1 reads [y; attention] (2u)
        self.attention_layer = keras.layers.Dense(u, use_bias=False, kernel_initializer=uniform())
        self.project = keras.layers.Dense(hp["target_vocab_size"], use_bias=False, kernel_initializer=uniform())
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")  # g of "scaled_luong"
        for layer, width in ((self.source_embed, None), (self.target_embed, None), (self.encoder_fwd, u),
                             (self.encoder_bwd, u), (self.memory_layer, 2 * u), (self.cells[0], 2 * u),
                             (self.cells[1], u), (self.attention_layer, 3 * u), (self.project, u)):
            layer.build((None, None) if width is None else (None, None, width) if isinstance(
                layer, keras.layers.RNN) else (None, width))
        self.built = True

    def encode(self, source: tf.Tensor, lengths: tf.Tensor, training: bool) -> tuple[tf.Tensor, list[list[tf.Tensor]]]:
        x = self.dropout(self.source_embed(source), training=training)
        mask = tf.sequence_mask(lengths, tf.shape(source)[1])
        fwd, h_f, c_f = self.encoder_fwd(x, mask=mask, training=training)
        bwd, h_b, c_b = self.encoder_bwd(x, mask=mask, training=training)
        memory = tf.concat([fwd, tf.reverse(bwd, axis=[1])], axis=-1)  # the backward outputs come reversed
        memory = memory * tf.cast(mask, memory.dtype)[:, :, None]       # padding reads as zeros, as packed
        return memory, [[h_f, c_f], [h_b, c_b]]                         # forward state -> layer 1, backward -> 2

    def call(self, source: tf.Tensor, source_lengths: tf.Tensor, target_in: tf.Tensor,
             training: bool = False) -> tf.Tensor:
        memory, states = self.encode(source, source_lengths, training)
        keys = self.memory_layer(memory)                                # (N, S, u)
        pad = tf.logical_not(tf.sequence_mask(source_lengths, tf.shape(source)[1]))
        embedded = self.target_embed(target_in)                         # (N, T, u)
        attention = tf.zeros((tf.shape(embedded)[0], self.units), embedded.dtype)
        steps = tf.shape(embedded)[1]

        def step(t: tf.Tensor, attention: tf.Tensor, states: list[list[tf.Tensor]], outputs: tf.TensorArray) -> Any:
            x = tf.concat([embedded[:, t], attention], axis=-1)
            new_states = []
            for cell, state in zip(self.cells, states):
                x, state = cell(self.dropout(x, training=training), state, training=training)
                new_states.append(state)
            scores = tf.cast(self.scale, x.dtype) * tf.einsum("nu,nsu->ns", x, keys)
            scores = tf.where(pad, tf.constant(-np.inf, scores.dtype), scores)
            context = tf.einsum("ns,nsv->nv", tf.nn.softmax(scores, axis=-1), memory)
            attention = self.attention_layer(tf.concat([x, context], axis=-1))
            return t + 1, attention, new_states, outputs.write(t, attention)

        # tf.while_loop: Keras runs call() without AutoGraph; eagerly it is a Python loop
        *_, outputs = tf.while_loop(lambda t, *_: t < steps, step,
                                    (tf.constant(0), attention, states, tf.TensorArray(embedded.dtype, size=steps)))
        return self.project(tf.transpose(outputs.stack(), (1, 0, 2)))


class Luong234(keras.optimizers.schedules.LearningRateSchedule):
    """NMT's "luong234": after 2/3 of the steps, halve the learning rate 4 times at equal intervals."""

    def __init__(self, learning_rate: float, num_train_steps: int) -> None:
        self.learning_rate = learning_rate
        self.start = int(num_train_steps * 2 / 3)
        self.every = max(1, int((num_train_steps - self.start) / 4))

    def __call__(self, step: Any) -> tf.Tensor:
        halvings = tf.maximum(tf.cast(step, tf.int64) - self.start, -1) // self.every
        return self.learning_rate * tf.pow(0.5, tf.cast(tf.maximum(halvings, 0), tf.float32))


@dataclass
class Training:
    model: Seq2Seq
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


def _loss(logits: tf.Tensor, target_out: tf.Tensor) -> tf.Tensor:
    """Summed cross-entropy of the target tokens (labels -100 are padding) divided by the batch size."""
    valid = target_out >= 0
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.where(valid, target_out, 0),
                                                               tf.cast(logits, tf.float32))
    return tf.reduce_sum(tf.where(valid, per_token, 0.0)) / tf.cast(tf.shape(logits)[0], tf.float32)


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    if hp["decay_scheme"] != "luong234":
        raise ValueError(f"decay_scheme {hp['decay_scheme']!r} is not implemented; use 'luong234'")
    if hp["optimizer"] != "sgd":
        raise ValueError(f"optimizer {hp['optimizer']!r} is not implemented; use 'sgd'")
    model = Seq2Seq(hp)
    optimizer = keras.optimizers.SGD(learning_rate=Luong234(hp["learning_rate"], hp["num_train_steps"]),
                                     global_clipnorm=hp["max_gradient_norm"])
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    ids = tf.TensorSpec((None, None), tf.int32)
    signature = [ids, tf.TensorSpec((None,), tf.int32), ids, ids]

    @tf.function(input_signature=signature)
    def step(source: tf.Tensor, source_lengths: tf.Tensor, target_in: tf.Tensor, target_out: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = _loss(model(source, source_lengths, target_in, training=True), target_out)
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, tf.Tensor]:
    with tf.device(device):
        return {
            "source": tf.constant(batch.source, tf.int32),
            "source_lengths": tf.constant(batch.source_lengths, tf.int32),
            "target_in": tf.constant(batch.target_in, tf.int32),
            "target_out": tf.constant(batch.target_out, tf.int32),
        }


def forward(training: Training, inputs: dict[str, tf.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update): log-probabilities
    (N, T, V) and target lengths (N,), as NumPy, to compare across frameworks."""
    logits = training.model(inputs["source"], inputs["source_lengths"], inputs["target_in"], training=False)
    lengths = np.sum(inputs["target_out"].numpy() >= 0, axis=1)
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1).numpy(), lengths


def train_step(training: Training, inputs: dict[str, tf.Tensor], precision: Any) -> tf.Tensor:
    """One SGD step, global gradient norm clipped; the math mode is set by the adapter."""
    return training.step(inputs["source"], inputs["source_lengths"], inputs["target_in"], inputs["target_out"])
