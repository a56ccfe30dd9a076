"""BERT on MXNet 1.9 Gluon, built by hand with transformers' BertForPreTraining layout:
embeddings (word, token type, position) + LayerNorm, encoder layers (query, key, value, output
dense + LayerNorm, intermediate GELU dense, output dense + LayerNorm), the tanh pooler, the masked-LM
head (dense + GELU + LayerNorm, a decoder tied to the word embeddings with its own bias) and the
next-sentence head; for the SQuAD setting a start/end head instead. Adam with decoupled weight
decay (AdamW; off for LayerNorm and biases), BERT's linear warm-up and decay, gradients clipped at
a global norm.

The same network as pytorch.py from the same hyperparameters (workload.toml). Nothing here times,
logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

IGNORE = -100  # masked-LM label of positions that are not predicted (data.IGNORE)


def _dense(units: int, in_units: int, prefix: str, activation: str | None = None) -> gluon.nn.Dense:
    return gluon.nn.Dense(units, activation=activation, flatten=False, in_units=in_units, prefix=prefix)


def _gelu(F: Any, x: Any) -> Any:
    return F.LeakyReLU(x, act_type="gelu")  # the exact, erf form (transformers' "gelu")


class TiedDecoder(gluon.HybridBlock):
    """Logits over the vocabulary with the word embeddings as weight (tied) and a bias of its own."""

    def __init__(self, embedding: gluon.nn.Embedding, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tied = (embedding,)  # in a tuple: an attribute that is a Block would become a child
        self.vocab = embedding.weight.shape[0]
        with self.name_scope():
            self.weight = embedding.weight  # the same Parameter: one table, two uses
            self.bias = self.params.get("bias", shape=(self.vocab,), init="zeros")

    @property
    def tied_to(self) -> gluon.nn.Embedding:
        return self._tied[0]

    def hybrid_forward(self, F: Any, x: Any, weight: Any, bias: Any) -> Any:
        return F.FullyConnected(x, weight, bias, num_hidden=self.vocab, flatten=False)


class EncoderLayer(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        h, i, eps = hp["hidden_size"], hp["intermediate_size"], hp["layer_norm_eps"]
        self.heads = hp["num_attention_heads"]
        self.head_size = h // self.heads
        with self.name_scope():
            self.query, self.key, self.value = (_dense(h, h, f"{n}_") for n in ("query", "key", "value"))
            self.attention_out = _dense(h, h, "attention_output_")
            self.attention_norm = gluon.nn.LayerNorm(epsilon=eps, in_channels=h, prefix="attention_norm_")
            self.intermediate = _dense(i, h, "intermediate_")
            self.output_dense = _dense(h, i, "output_")
            self.output_norm = gluon.nn.LayerNorm(epsilon=eps, in_channels=h, prefix="output_norm_")
            self.attention_dropout = gluon.nn.Dropout(hp["attention_probs_dropout_prob"])
            self.dropout = gluon.nn.Dropout(hp["hidden_dropout_prob"])

    def _split(self, F: Any, x: Any) -> Any:  # (B, S, H) -> (B * heads, S, d)
        x = F.transpose(F.reshape(x, (0, 0, self.heads, -1)), (0, 2, 1, 3))
        return F.reshape(x, (-3, 0, 0))

    def hybrid_forward(self, F: Any, x: Any, bias: Any) -> Any:
        q, k, v = self._split(F, self.query(x)), self._split(F, self.key(x)), self._split(F, self.value(x))
        scores = F.batch_dot(q, k, transpose_b=True) / math.sqrt(self.head_size)      # (B*heads, S, S)
        scores = F.reshape(scores, (-4, -1, self.heads, 0, 0))                         # (B, heads, S, S)
        probs = self.attention_dropout(F.softmax(F.broadcast_add(scores, bias), axis=-1))
        context = F.batch_dot(F.reshape(probs, (-3, 0, 0)), v)                         # (B*heads, S, d)
        context = F.reshape(F.transpose(F.reshape(context, (-4, -1, self.heads, 0, 0)), (0, 2, 1, 3)), (0, 0, -3))
        x = self.attention_norm(x + self.dropout(self.attention_out(context)))
        y = self.output_dense(_gelu(F, self.intermediate(x)))
        return self.output_norm(x + self.dropout(y))


class Bert(gluon.HybridBlock):
    def __init__(self, hp: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if hp["seq_len"] > hp["max_position_embeddings"]:
            raise ValueError(f"seq_len {hp['seq_len']} exceeds max_position_embeddings {hp['max_position_embeddings']}")
        h = hp["hidden_size"]
        self.task, self.seq_len = hp["task"], hp["seq_len"]
        with self.name_scope():
            self.word = gluon.nn.Embedding(hp["vocab_size"], h, prefix="word_embeddings_")
            self.token_type = gluon.nn.Embedding(hp["type_vocab_size"], h, prefix="token_type_embeddings_")
            self.position = gluon.nn.Embedding(hp["max_position_embeddings"], h, prefix="position_embeddings_")
            self.embed_norm = gluon.nn.LayerNorm(epsilon=hp["layer_norm_eps"], in_channels=h, prefix="embeddings_norm_")
            self.dropout = gluon.nn.Dropout(hp["hidden_dropout_prob"])
            self.encoder = gluon.nn.HybridSequential(prefix="encoder_")
            with self.encoder.name_scope():
                for i in range(hp["num_hidden_layers"]):
                    self.encoder.add(EncoderLayer(hp, prefix=f"layer{i}_"))
            if self.task == "pretraining":
                self.pooler = _dense(h, h, "pooler_", activation="tanh")
                self.transform = _dense(h, h, "transform_")
                self.transform_norm = gluon.nn.LayerNorm(epsilon=hp["layer_norm_eps"], in_channels=h,
                                                         prefix="transform_norm_")
                self.decoder = TiedDecoder(self.word, prefix="decoder_")
                self.next_sentence = _dense(2, h, "seq_relationship_")
            else:
                self.qa = _dense(2, h, "qa_outputs_")

    def hybrid_forward(self, F: Any, input_ids: Any, token_type_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
        """Token ids (B, S) -> (masked-LM logits (B, S, V), next-sentence logits (B, 2)) for pre-training,
        (start logits, end logits) (B, S) each for SQuAD."""
        positions = F.arange(self.seq_len)
        x = self.word(input_ids) + self.token_type(token_type_ids)   # transformers' order: word, type, position
        x = self.dropout(self.embed_norm(F.broadcast_add(x, F.expand_dims(self.position(positions), 0))))
        bias = F.expand_dims(F.expand_dims((1.0 - attention_mask) * -1e9, 1), 1)  # padding keys: no attention
        for layer in self.encoder:
            x = layer(x, bias)
        if self.task == "pretraining":
            pooled = self.pooler(F.squeeze(F.slice_axis(x, axis=1, begin=0, end=1), axis=1))
            logits = self.decoder(self.transform_norm(_gelu(F, self.transform(x))))
            return logits, self.next_sentence(pooled)
        qa = self.qa(x)
        return F.squeeze(F.slice_axis(qa, axis=-1, begin=0, end=1), axis=-1), \
            F.squeeze(F.slice_axis(qa, axis=-1, begin=1, end=2), axis=-1)


def learning_rate(hp: dict[str, Any], step: int) -> float:
    """optimization.py's schedule, as pytorch.py steps it: lr x (step+1)/warmup during warm-up, then
    lr x (1 - (step+1)/total), never below 0; `step` is the number of updates already taken."""
    s, warmup = step + 1, hp["warmup_steps"]
    return hp["learning_rate"] * (s / warmup if s < warmup else max(0.0, 1.0 - s / hp["num_train_steps"]))


@dataclass
class Training:
    model: Bert
    trainer: gluon.Trainer
    ctx: mx.Context
    hp: dict[str, Any]
    decay: list[Any] = field(default_factory=list)   # weights that take weight decay (not LayerNorm, not biases)
    steps: int = 0


def build(hp: dict[str, Any], ctx: mx.Context) -> Training:
    model = Bert(hp, prefix="bert_")
    model.initialize(mx.init.Normal(hp["initializer_range"]), ctx=ctx)  # weights N(0, 0.02); biases 0, LayerNorm 1/0
    model.hybridize(static_alloc=True)
    params = model.collect_params()
    trainer = gluon.Trainer(params, "adam", {
        "learning_rate": learning_rate(hp, 0), "beta1": hp["adam_beta1"], "beta2": hp["adam_beta2"],
        "epsilon": hp["adam_epsilon"], "wd": 0.0})  # decay is decoupled: applied in train_step
    decay = [p for name, p in params.items() if name.endswith("_weight")]
    return Training(model, trainer, ctx, hp, decay)


def to_device(batch: Any, ctx: mx.Context) -> dict[str, Any]:
    """The batch on `ctx` (float32, as MXNet's operators take indices; exact below 2^24)."""
    arrays = {"input_ids": batch.input_ids, "token_type_ids": batch.token_type_ids, "attention_mask": batch.attention_mask}
    return {**{k: mx.nd.array(v, ctx=ctx) for k, v in arrays.items()},
            "targets": {k: mx.nd.array(v, ctx=ctx) for k, v in batch.targets.items()}}


def forward(training: Training, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The network alone in inference mode (no loss, no update): its logits, as NumPy."""
    a, b = training.model(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
    names = ("prediction_logits", "seq_relationship_logits") if training.model.task == "pretraining" \
        else ("start_logits", "end_logits")
    return {names[0]: a.asnumpy(), names[1]: b.asnumpy()}


def _mean_ce(logits: Any, labels: Any) -> Any:
    """Cross-entropy averaged over the labels that are not IGNORE (PyTorch's CrossEntropyLoss)."""
    keep = labels != IGNORE
    picked = mx.nd.pick(mx.nd.log_softmax(logits, axis=-1), mx.nd.maximum(labels, 0), axis=-1)
    return -(picked * keep).sum() / keep.sum()


def task_loss(outputs: tuple[Any, Any], targets: dict[str, Any], seq_len: int) -> Any:
    """Masked LM + next sentence (BertForPreTraining), or the mean of the start and end cross-entropies
    with positions past the sequence ignored (BertForQuestionAnswering)."""
    if "labels" in targets:
        return _mean_ce(outputs[0], targets["labels"]) + _mean_ce(outputs[1], targets["next_sentence_label"])

    def ignored(p: Any) -> Any:
        p = mx.nd.clip(p, 0, seq_len)
        return mx.nd.where(p == seq_len, mx.nd.full(p.shape, IGNORE, ctx=p.context), p)
    return (_mean_ce(outputs[0], ignored(targets["start_positions"]))
            + _mean_ce(outputs[1], ignored(targets["end_positions"]))) / 2


def train_step(training: Training, inputs: dict[str, Any], precision: Any) -> Any:
    """One AdamW step on the task's loss, gradients clipped to global norm max_grad_norm (after
    unscaling, under AMP), the learning rate on its schedule."""
    hp, model, trainer = training.hp, training.model, training.trainer
    with autograd.record():
        a, b = model(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
        loss = task_loss((a.astype("float32"), b.astype("float32")), inputs["targets"], hp["seq_len"])
        with precision.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    precision.clip_global_norm(trainer, model.collect_params().values(), hp["max_grad_norm"])
    lr = learning_rate(hp, training.steps)
    for p in training.decay:  # decoupled weight decay, before the Adam update (torch.optim.AdamW's order)
        p.set_data(p.data(training.ctx) * (1.0 - lr * hp["weight_decay"]))
    trainer.set_learning_rate(lr)
    trainer.step(1)  # the loss is already a mean
    training.steps += 1
    return loss
