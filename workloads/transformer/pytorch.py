"""Transformer base on PyTorch: the network, Adam with the inverse-square-root warm-up schedule,
and one training step with label-smoothed cross-entropy.

Every size comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from _shared import torch_amp as amp


def sinusoids(length: int, d_model: int) -> torch.Tensor:
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
    return pe


class Transformer(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        d = hp["d_model"]
        if hp["shared_embeddings"] and hp["source_vocab_size"] != hp["target_vocab_size"]:
            raise ValueError("shared_embeddings needs source_vocab_size == target_vocab_size")
        self.d_model = d
        self.embed = nn.Embedding(hp["source_vocab_size"], d)
        nn.init.normal_(self.embed.weight, 0.0, d ** -0.5)
        self.target_embed = self.embed if hp["shared_embeddings"] else nn.Embedding(hp["target_vocab_size"], d)
        self.register_buffer("pe", sinusoids(hp["max_length"] + 1, d), persistent=False)
        self.dropout = nn.Dropout(hp["dropout"])
        layer = dict(d_model=d, nhead=hp["heads"], dim_feedforward=hp["ffn_hidden"], dropout=hp["dropout"],
                     activation=hp["activation"], batch_first=True)
        # Post-norm layers and no final LayerNorm: the paper's "LayerNorm(x + Sublayer(x))".
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), hp["encoder_layers"],
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), hp["decoder_layers"])
        # The pre-softmax projection: with shared embeddings its weight *is* the embedding table (tied).
        self.project = nn.Linear(d, hp["target_vocab_size"], bias=False)
        if hp["shared_embeddings"]:
            self.project.weight = self.target_embed.weight

    def _embed(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(table(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]])

    def forward(self, source: torch.Tensor, source_pad: torch.Tensor, target_in: torch.Tensor,
                target_pad: torch.Tensor) -> torch.Tensor:
        t = target_in.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=target_in.device), diagonal=1)
        memory = self.encoder(self._embed(self.embed, source), src_key_padding_mask=source_pad)
        h = self.decoder(self._embed(self.target_embed, target_in), memory, tgt_mask=causal,
                         tgt_key_padding_mask=target_pad, memory_key_padding_mask=source_pad)
        return self.project(h)


def inverse_sqrt(d_model: int, warmup_steps: int) -> Any:
    """Sec. 5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step from 1."""
    return lambda step: d_model ** -0.5 * min((step + 1) ** -0.5, (step + 1) * warmup_steps ** -1.5)


@dataclass
class Training:
    model: Transformer
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss: nn.CrossEntropyLoss


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = Transformer(hp).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(hp["adam_beta1"], hp["adam_beta2"]),
                                 eps=hp["adam_epsilon"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(hp["d_model"], hp["warmup_steps"]))
    return Training(model, optimizer, schedule, nn.CrossEntropyLoss(ignore_index=-100,
                                                                    label_smoothing=hp["label_smoothing"]))


def _padding(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """True where a position is padding."""
    return torch.arange(width, device=lengths.device)[None, :] >= lengths[:, None]


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    nb = device.type == "cuda"
    src_len, tgt_len = torch.from_numpy(batch.source_lengths), torch.from_numpy(batch.target_lengths)
    return {
        "source": torch.from_numpy(batch.source).to(device, non_blocking=nb),
        "source_pad": _padding(src_len, batch.source.shape[1]).to(device, non_blocking=nb),
        "target_in": torch.from_numpy(batch.target_in).to(device, non_blocking=nb),
        "target_pad": _padding(tgt_len, batch.target_in.shape[1]).to(device, non_blocking=nb),
        "target_out": torch.from_numpy(batch.target_out).to(device, non_blocking=nb),
    }


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    """The network alone in inference mode (no loss, no update, dropout off): log-probabilities
    (N, T, V) and target lengths (N,), as NumPy, to compare across frameworks. PyTorch's fused
    inference "fast path" is off, so every layer runs as the module it is (and is counted)."""
    model = training.model
    was_training = model.training
    model.eval()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            logits = model(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"])
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        model.train(was_training)
    lengths = (inputs["target_out"] >= 0).sum(dim=1)
    return logits.float().log_softmax(-1).cpu().numpy(), lengths.cpu().numpy()


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One Adam step on the mean label-smoothed cross-entropy per target token."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = model(inputs["source"], inputs["source_pad"], inputs["target_in"], inputs["target_pad"])
    loss = training.loss(logits.float().flatten(0, 1), inputs["target_out"].flatten())
    amp.scaled_update(loss, optimizer, precision)
    training.schedule.step()
    return loss.detach()
