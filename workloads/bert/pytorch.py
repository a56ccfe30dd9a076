"""BERT on PyTorch with Hugging Face transformers: BertForPreTraining (masked LM + next sentence)
or BertForQuestionAnswering (SQuAD), built from a BertConfig of the hyperparameters handed in
(workload.toml), freshly initialized; AdamW with linear warm-up and decay, gradient clipping.

Nothing here times, logs or profiles, and nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from transformers import BertConfig, BertForPreTraining, BertForQuestionAnswering  # noqa: E402

from _shared import torch_amp as amp

CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")


def config(hp: dict[str, Any]) -> BertConfig:
    if hp["seq_len"] > hp["max_position_embeddings"]:
        raise ValueError(f"seq_len {hp['seq_len']} exceeds max_position_embeddings {hp['max_position_embeddings']}")
    values = {**hp, "pad_token_id": hp["pad_id"]}
    return BertConfig(**{k: values[k] for k in CONFIG_KEYS}, attn_implementation="sdpa")


def make_model(hp: dict[str, Any]) -> nn.Module:
    """A freshly initialized BERT for hp["task"] ("pretraining" or "squad")."""
    cls = {"pretraining": BertForPreTraining, "squad": BertForQuestionAnswering}[hp["task"]]
    return cls(config(hp))


def linear_warmup_decay(warmup: int, total: int) -> Any:
    """optimization.py: lr x step/warmup during warm-up, then x (1 - step/total), never below 0."""
    return lambda step: (step + 1) / warmup if step + 1 < warmup else max(0.0, 1.0 - (step + 1) / total)


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    max_grad_norm: float


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = make_model(hp).to(device)
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp["learning_rate"], betas=(hp["adam_beta1"], hp["adam_beta2"]), eps=hp["adam_epsilon"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(hp["warmup_steps"],
                                                                                hp["num_train_steps"]))
    return Training(model, optimizer, schedule, hp["max_grad_norm"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    nb = device.type == "cuda"
    arrays = {"input_ids": batch.input_ids, "token_type_ids": batch.token_type_ids,
              "attention_mask": batch.attention_mask, **batch.targets}
    return {k: torch.from_numpy(v).to(device, non_blocking=nb) for k, v in arrays.items()}


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The network alone in inference mode (no loss, no update): its logits, as NumPy."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(input_ids=inputs["input_ids"], token_type_ids=inputs["token_type_ids"],
                        attention_mask=inputs["attention_mask"])
    finally:
        model.train(was_training)
    if hasattr(out, "prediction_logits"):
        return {"prediction_logits": out.prediction_logits.cpu().numpy(), "seq_relationship_logits":
                out.seq_relationship_logits.cpu().numpy()}
    return {"start_logits": out.start_logits.cpu().numpy(), "end_logits": out.end_logits.cpu().numpy()}


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One AdamW step on the task's loss (masked LM + next sentence, or start + end cross-entropy)."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = model(**inputs).loss
    amp.scaled_update(loss, optimizer, precision,
                      clip=lambda: nn.utils.clip_grad_norm_(model.parameters(), training.max_grad_norm))
    training.schedule.step()
    return loss.detach().float()
