"""Seq2Seq (the NMT tutorial's attention model) on PyTorch: a bidirectional LSTM encoder, a
2-layer LSTM decoder with scaled Luong attention and input feeding, SGD with gradient clipping.

Every size comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles. PyTorch's LSTMs carry two bias vectors per cell where TensorFlow's carry one,
so each cell here has 4 x num_units more parameters than the tutorial's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from _shared import torch_amp as amp


def _check(hp: dict[str, Any]) -> None:
    wanted = {"encoder_type": "bi", "encoder_layers": 2, "decoder_layers": 2, "unit_type": "lstm",
              "attention": "scaled_luong", "output_attention": True, "residual": False}
    wrong = {k: hp[k] for k, v in wanted.items() if hp[k] != v}
    if wrong:
        raise ValueError(f"this implementation builds the tutorial's IWSLT15 architecture {wanted}; got {wrong}")


class Seq2Seq(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        _check(hp)
        u = hp["num_units"]
        self.source_embed = nn.Embedding(hp["source_vocab_size"], u)
        self.target_embed = nn.Embedding(hp["target_vocab_size"], u)
        self.dropout = nn.Dropout(hp["dropout"])
        self.encoder = nn.LSTM(u, u, num_layers=1, bidirectional=True, batch_first=True)
        self.memory_layer = nn.Linear(2 * u, u, bias=False)          # keys of the Luong attention
        self.scale = nn.Parameter(torch.ones(()))                     # g of "scaled_luong"
        self.cells = nn.ModuleList([nn.LSTMCell(2 * u, u), nn.LSTMCell(u, u)])  # input feeding: [y; attention]
        self.attention_layer = nn.Linear(u + 2 * u, u, bias=False)    # W_a [h_t; context]
        self.project = nn.Linear(u, hp["target_vocab_size"], bias=False)
        for p in self.parameters():
            nn.init.uniform_(p, -hp["init_weight"], hp["init_weight"])
        nn.init.ones_(self.scale)
        self._add_forget_bias(hp["forget_bias"], u)

    def _add_forget_bias(self, value: float, units: int) -> None:
        """TensorFlow's LSTM cells add forget_bias to the forget gate (PyTorch gate order i, f, g, o)."""
        with torch.no_grad():
            for name, p in [*self.encoder.named_parameters(), *self.cells.named_parameters()]:
                if "bias_ih" in name:
                    p[units : 2 * units] += value

    def encode(self, source: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        x = self.dropout(self.source_embed(source))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=source.shape[1])
        return memory, [(h[0], c[0]), (h[1], c[1])]                  # forward state -> layer 1, backward -> layer 2

    def forward(self, source: torch.Tensor, source_lengths: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        memory, states = self.encode(source, source_lengths)
        keys = self.memory_layer(memory)                               # (N, S, u)
        pad = torch.arange(source.shape[1], device=source.device)[None, :] >= source_lengths.to(source.device)[:, None]
        embedded = self.target_embed(target_in)                        # (N, T, u)
        attention = embedded.new_zeros(embedded.shape[0], embedded.shape[2])
        outputs = []
        for t in range(embedded.shape[1]):
            x = torch.cat([embedded[:, t], attention], dim=-1)
            for i, cell in enumerate(self.cells):
                states[i] = cell(self.dropout(x), states[i])
                x = states[i][0]
            scores = self.scale * torch.einsum("nu,nsu->ns", x, keys)
            weights = scores.masked_fill(pad, float("-inf")).softmax(dim=-1)
            context = torch.einsum("ns,nsv->nv", weights, memory)
            attention = self.attention_layer(torch.cat([x, context], dim=-1))
            outputs.append(attention)
        return self.project(torch.stack(outputs, dim=1))


def luong234(num_train_steps: int) -> Any:
    """NMT's "luong234": after 2/3 of the steps, halve the learning rate 4 times at equal intervals."""
    start = int(num_train_steps * 2 / 3)
    every = max(1, int((num_train_steps - start) / 4))
    return lambda step: 1.0 if step < start else 0.5 ** ((step - start) // every)


@dataclass
class Training:
    model: Seq2Seq
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss: nn.CrossEntropyLoss
    max_norm: float


def build(hp: dict[str, Any], device: torch.device) -> Training:
    if hp["decay_scheme"] != "luong234":
        raise ValueError(f"decay_scheme {hp['decay_scheme']!r} is not implemented; use 'luong234'")
    model = Seq2Seq(hp).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=hp["learning_rate"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, luong234(hp["num_train_steps"]))
    return Training(model, optimizer, schedule, nn.CrossEntropyLoss(ignore_index=-100, reduction="sum"),
                    hp["max_gradient_norm"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    nb = device.type == "cuda"
    return {
        "source": torch.from_numpy(batch.source).to(device, non_blocking=nb),
        "source_lengths": torch.from_numpy(batch.source_lengths),
        "target_in": torch.from_numpy(batch.target_in).to(device, non_blocking=nb),
        "target_out": torch.from_numpy(batch.target_out).to(device, non_blocking=nb),
    }


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One SGD step on the summed target-token cross-entropy / batch size, global norm clipped."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = model(inputs["source"], inputs["source_lengths"], inputs["target_in"])
    loss = training.loss(logits.float().flatten(0, 1), inputs["target_out"].flatten()) / logits.shape[0]
    amp.scaled_update(loss, optimizer, precision,
                      clip=lambda: nn.utils.clip_grad_norm_(model.parameters(), training.max_norm))
    training.schedule.step()
    return loss.detach()


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    """The network alone in inference mode (no loss, no update): log-probabilities (N, T, V) and
    target lengths (N,), as NumPy, to compare across frameworks."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(inputs["source"], inputs["source_lengths"], inputs["target_in"])
    finally:
        model.train(was_training)
    lengths = (inputs["target_out"] >= 0).sum(dim=1)
    return logits.float().log_softmax(-1).cpu().numpy(), lengths.cpu().numpy()
