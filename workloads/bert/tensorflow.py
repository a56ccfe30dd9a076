"""BERT on TensorFlow 2 / Keras 3, built by hand with transformers' BertForPreTraining layout:
embeddings (word, token type, position) + LayerNorm, encoder layers (query, key, value, output
dense + LayerNorm, intermediate GELU dense, output dense + LayerNorm), the tanh pooler, the masked-LM
head (dense + GELU + LayerNorm, a decoder tied to the word embeddings with its own bias) and the
next-sentence head; for the SQuAD setting a start/end head instead. AdamW with BERT's linear warm-up
and decay, weight decay off for LayerNorm and biases, gradients clipped at a global norm.

The same network as pytorch.py from the same hyperparameters (workload.toml). Nothing here times,
logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from _shared.tf_amp import built, scaled_update

IGNORE = -100  # masked-LM label of positions that are not predicted (data.IGNORE)


def _dense(units: int, hp: dict[str, Any], name: str, activation: Any = None) -> keras.layers.Dense:
    init = keras.initializers.RandomNormal(stddev=hp["initializer_range"])  # transformers' init
    return keras.layers.Dense(units, activation=activation, kernel_initializer=init, name=name)


def _gelu(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.gelu(x, approximate=False)  # transformers' "gelu": the exact, erf form


class TiedDecoder(keras.layers.Layer):
    """Logits over the vocabulary with the word embeddings as weight (tied) and a bias of its own."""

    def __init__(self, embedding: keras.layers.Embedding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tied_to = embedding

    def build(self, input_shape: Any) -> None:
        self.bias = self.add_weight(shape=(self.tied_to.input_dim,), initializer="zeros", name="bias")
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        weight = tf.cast(self.tied_to.embeddings, x.dtype)
        return tf.matmul(x, weight, transpose_b=True) + tf.cast(self.bias, x.dtype)


class EncoderLayer(keras.layers.Layer):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        h = hp["hidden_size"]
        self.heads, self.head_size = hp["num_attention_heads"], h // hp["num_attention_heads"]
        self.query, self.key, self.value = (_dense(h, hp, n) for n in ("query", "key", "value"))
        self.attention_out = _dense(h, hp, "attention_output")
        self.attention_norm = keras.layers.LayerNormalization(epsilon=hp["layer_norm_eps"], name="attention_norm")
        self.intermediate = _dense(hp["intermediate_size"], hp, "intermediate", activation=_gelu)
        self.output_dense = _dense(h, hp, "output")
        self.output_norm = keras.layers.LayerNormalization(epsilon=hp["layer_norm_eps"], name="output_norm")
        self.attention_dropout = keras.layers.Dropout(hp["attention_probs_dropout_prob"])
        self.dropout = keras.layers.Dropout(hp["hidden_dropout_prob"])

    def build(self, input_shape: Any) -> None:
        h = input_shape[-1]
        for layer in (self.query, self.key, self.value, self.attention_out, self.intermediate):
            layer.build((None, None, h))
        self.attention_norm.build((None, None, h))
        self.output_dense.build((None, None, self.intermediate.units))
        self.output_norm.build((None, None, h))
        self.built = True

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        b, s = tf.shape(x)[0], tf.shape(x)[1]
        return tf.transpose(tf.reshape(x, (b, s, self.heads, self.head_size)), (0, 2, 1, 3))  # (B, heads, S, d)

    def call(self, x: tf.Tensor, bias: tf.Tensor, training: bool = False) -> tf.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = tf.matmul(q, k, transpose_b=True) / tf.cast(tf.sqrt(float(self.head_size)), q.dtype)
        probs = tf.nn.softmax(tf.cast(scores, tf.float32) + tf.cast(bias, tf.float32), axis=-1)  # Keras casts `bias`
        probs = self.attention_dropout(tf.cast(probs, v.dtype), training=training)
        context = tf.transpose(tf.matmul(probs, v), (0, 2, 1, 3))
        context = tf.reshape(context, (tf.shape(x)[0], tf.shape(x)[1], self.heads * self.head_size))
        x = self.attention_norm(x + self.dropout(self.attention_out(context), training=training))
        y = self.output_dense(self.intermediate(x))
        return self.output_norm(x + self.dropout(y, training=training))


class Bert(keras.Model):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__(name="bert")
        if hp["seq_len"] > hp["max_position_embeddings"]:
            raise ValueError(f"seq_len {hp['seq_len']} exceeds max_position_embeddings {hp['max_position_embeddings']}")
        h = hp["hidden_size"]

        def init() -> keras.initializers.Initializer:  # one per weight: one instance repeats its draw
            return keras.initializers.RandomNormal(stddev=hp["initializer_range"])

        self.task, self.seq_len = hp["task"], hp["seq_len"]
        self.word = keras.layers.Embedding(hp["vocab_size"], h, embeddings_initializer=init(), name="word_embeddings")
        self.token_type = keras.layers.Embedding(hp["type_vocab_size"], h, embeddings_initializer=init(),
                                                 name="token_type_embeddings")
        self.position = keras.layers.Embedding(hp["max_position_embeddings"], h, embeddings_initializer=init(),
                                               name="position_embeddings")
        self.embed_norm = keras.layers.LayerNormalization(epsilon=hp["layer_norm_eps"], name="embeddings_norm")
        self.dropout = keras.layers.Dropout(hp["hidden_dropout_prob"])
        self.encoder = [EncoderLayer(hp, name=f"layer{i}") for i in range(hp["num_hidden_layers"])]
        if self.task == "pretraining":
            self.pooler = _dense(h, hp, "pooler", activation="tanh")
            self.transform = _dense(h, hp, "transform", activation=_gelu)
            self.transform_norm = keras.layers.LayerNormalization(epsilon=hp["layer_norm_eps"], name="transform_norm")
            self.decoder = TiedDecoder(self.word, name="decoder")
            self.next_sentence = _dense(2, hp, "seq_relationship")
        else:
            self.qa = _dense(2, hp, "qa_outputs")
        self.build((None, self.seq_len))

    def build(self, input_shape: Any) -> None:
        h = self.word.output_dim
        for layer in (self.word, self.token_type, self.position):
            layer.build((None, None))
        self.embed_norm.build((None, None, h))
        for layer in self.encoder:
            layer.build((None, None, h))
        heads = (self.pooler, self.transform, self.transform_norm, self.decoder, self.next_sentence) \
            if self.task == "pretraining" else (self.qa,)
        for layer in heads:
            layer.build((None, None, h))
        self.built = True

    def call(self, input_ids: tf.Tensor, token_type_ids: tf.Tensor, attention_mask: tf.Tensor,
             training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """Token ids (B, S) -> (masked-LM logits (B, S, V), next-sentence logits (B, 2)) for pre-training,
        (start logits, end logits) (B, S) each for SQuAD; float32."""
        positions = tf.range(tf.shape(input_ids)[1])[None]
        x = self.word(input_ids) + self.token_type(token_type_ids)   # transformers' order: word, type, position
        x = self.dropout(self.embed_norm(x + self.position(positions)), training=training)
        bias = (1.0 - tf.cast(attention_mask[:, None, None, :], tf.float32)) * -1e9  # padding keys get no attention
        for layer in self.encoder:
            x = layer(x, bias, training=training)
        if self.task == "pretraining":
            pooled = self.pooler(x[:, 0])
            logits = self.decoder(self.transform_norm(self.transform(x)))
            return tf.cast(logits, tf.float32), tf.cast(self.next_sentence(pooled), tf.float32)
        start, end = tf.unstack(tf.cast(self.qa(x), tf.float32), axis=-1)
        return start, end


class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """optimization.py's schedule, as pytorch.py steps it: lr x (step+1)/warmup during warm-up, then
    lr x (1 - (step+1)/total), never below 0; `step` is the number of updates already taken."""

    def __init__(self, lr: float, warmup: int, total: int) -> None:
        self.lr, self.warmup, self.total = lr, warmup, total

    def __call__(self, step: Any) -> tf.Tensor:
        s = tf.cast(step, tf.float32) + 1.0
        return self.lr * tf.where(s < self.warmup, s / self.warmup, tf.maximum(0.0, 1.0 - s / self.total))

    def get_config(self) -> dict[str, Any]:
        return {"lr": self.lr, "warmup": self.warmup, "total": self.total}


def _mean_ce(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Cross-entropy averaged over the labels that are not IGNORE (PyTorch's CrossEntropyLoss)."""
    keep = tf.not_equal(labels, IGNORE)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.where(keep, labels, 0), logits)
    keep = tf.cast(keep, tf.float32)
    return tf.reduce_sum(ce * keep) / tf.reduce_sum(keep)


def task_loss(outputs: tuple[tf.Tensor, tf.Tensor], targets: dict[str, tf.Tensor], seq_len: int) -> tf.Tensor:
    """Masked LM + next sentence (BertForPreTraining), or the mean of the start and end cross-entropies
    with positions past the sequence ignored (BertForQuestionAnswering)."""
    if "labels" in targets:
        return _mean_ce(outputs[0], targets["labels"]) + _mean_ce(outputs[1], targets["next_sentence_label"])
    ignored = lambda p: tf.where(tf.clip_by_value(p, 0, seq_len) == seq_len, tf.cast(IGNORE, p.dtype),  # noqa: E731
                                 tf.clip_by_value(p, 0, seq_len))
    return (_mean_ce(outputs[0], ignored(targets["start_positions"]))
            + _mean_ce(outputs[1], ignored(targets["end_positions"]))) / 2


@dataclass
class Training:
    model: Bert
    optimizer: keras.optimizers.Optimizer
    step: Any  # the compiled training step


TARGETS = {"pretraining": ("labels", "next_sentence_label"), "squad": ("start_positions", "end_positions")}


def build(hp: dict[str, Any], precision: Any) -> Training:
    """`precision` sets the Keras dtype policy before the layers exist and may wrap the optimizer."""
    model = Bert(hp)
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(hp["learning_rate"], hp["warmup_steps"], hp["num_train_steps"]),
        weight_decay=hp["weight_decay"], beta_1=hp["adam_beta1"], beta_2=hp["adam_beta2"],
        epsilon=hp["adam_epsilon"], global_clipnorm=hp["max_grad_norm"])
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])  # biases and LayerNorm
    optimizer = built(precision.wrap_optimizer(optimizer), model.trainable_variables)
    seq = tf.TensorSpec((None, hp["seq_len"]), tf.int64)
    names = TARGETS[hp["task"]]
    target_spec = {n: seq if n == "labels" else tf.TensorSpec((None,), tf.int64) for n in names}

    @tf.function(input_signature=[seq, seq, seq, target_spec])
    def step(input_ids: tf.Tensor, token_type_ids: tf.Tensor, attention_mask: tf.Tensor,
             targets: dict[str, tf.Tensor]) -> tf.Tensor:
        with tf.GradientTape() as tape:
            outputs = model(input_ids, token_type_ids, attention_mask, training=True)
            loss = task_loss(outputs, targets, hp["seq_len"])
        scaled_update(tape, loss, optimizer, model.trainable_variables)
        return loss

    return Training(model, optimizer, step)


def to_device(batch: Any, device: str) -> dict[str, Any]:
    with tf.device(device):
        return {"input_ids": tf.constant(batch.input_ids), "token_type_ids": tf.constant(batch.token_type_ids),
                "attention_mask": tf.constant(batch.attention_mask),
                "targets": {k: tf.constant(v) for k, v in batch.targets.items()}}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone in inference mode, run eagerly (no loss, no update): its logits, as NumPy."""
    a, b = training.model(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"], training=False)
    names = ("prediction_logits", "seq_relationship_logits") if training.model.task == "pretraining" \
        else ("start_logits", "end_logits")
    return {names[0]: a.numpy(), names[1]: b.numpy()}


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> tf.Tensor:
    """One AdamW step on the task's loss; the math mode is set by the adapter."""
    return training.step(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"], inputs["targets"])
