"""Llama on PyTorch with Hugging Face transformers: LlamaForCausalLM built from a LlamaConfig of the
hyperparameters handed in (workload.toml), freshly initialized, scaled dot-product attention; AdamW
with a linear warm-up and a cosine decay, gradient clipping.

Nothing here times, logs or profiles, and nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from _shared import torch_amp as amp
from _shared.torch_inference import inference

CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings", "max_position_embeddings",
               "initializer_range")


def rope_parameters(hp: dict[str, Any]) -> dict[str, Any]:
    """Llama 3.1's scaled RoPE (rope_type "llama3"), or plain RoPE ("default")."""
    rope = {"rope_type": hp["rope_type"], "rope_theta": float(hp["rope_theta"])}
    if hp["rope_type"] == "llama3":
        rope |= {"factor": float(hp["rope_factor"]), "low_freq_factor": float(hp["rope_low_freq_factor"]),
                 "high_freq_factor": float(hp["rope_high_freq_factor"]),
                 "original_max_position_embeddings": int(hp["rope_original_max_position_embeddings"])}
    return rope


def config(hp: dict[str, Any]) -> LlamaConfig:
    if hp["seq_len"] > hp["max_position_embeddings"]:
        raise ValueError(f"seq_len {hp['seq_len']} exceeds max_position_embeddings {hp['max_position_embeddings']}")
    return LlamaConfig(**{k: hp[k] for k in CONFIG_KEYS}, rope_parameters=rope_parameters(hp), use_cache=False,
                       attn_implementation="sdpa")


def make_model(hp: dict[str, Any]) -> nn.Module:
    return LlamaForCausalLM(config(hp))


def warmup_cosine(warmup: int, total: int, floor: float) -> Callable[[int], float]:
    """lr x step/warmup during warm-up, then a cosine from 1 down to `floor` at `total` steps (Llama 2's schedule)."""
    def factor(step: int) -> float:
        if step + 1 < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step + 1 - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


@dataclass
class Training:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    max_grad_norm: float


def optimize(hp: dict[str, Any], model: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW and its schedule over the model's Parameters as they are now: FSDP2 (--parallel fsdp) replaces them
    with sharded DTensors, so the kit builds these again after sharding."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"], betas=(hp["adam_beta1"], hp["adam_beta2"]),
                                  eps=hp["adam_epsilon"], weight_decay=hp["weight_decay"])
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(hp["warmup_steps"], hp["num_train_steps"], hp["min_lr_ratio"]))
    return optimizer, schedule


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2 shards one by one before the whole model (--parallel fsdp): the decoder layers, as torchtitan."""
    return list(model.model.layers)


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = make_model(hp).to(device)
    return Training(model, *optimize(hp, model), hp["max_grad_norm"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.from_numpy(batch.input_ids).to(device, non_blocking=device.type == "cuda")}


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The network alone in inference mode (no loss, no update): its logits, as NumPy."""
    with inference(training.model):
        logits = training.model(input_ids=inputs["input_ids"]).logits
    return {"logits": logits.float().cpu().numpy()}


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One AdamW step on the next-token cross-entropy (the labels are the inputs; the model shifts them)."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = model(input_ids=inputs["input_ids"], labels=inputs["input_ids"]).loss
    amp.scaled_update(loss, optimizer, precision,
                      clip=lambda: nn.utils.clip_grad_norm_(model.parameters(), training.max_grad_norm))
    training.schedule.step()
    return loss.detach().float()
