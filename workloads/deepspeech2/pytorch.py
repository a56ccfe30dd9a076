"""Deep Speech 2 on PyTorch: the network, its optimizer and one training step.

Every size comes from the hyperparameters handed in (workload.toml); nothing here times,
logs or profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from _shared import torch_amp as amp


def _conv_out(length: int | torch.Tensor, kernel: int, stride: int) -> Any:
    return (length + 2 * (kernel // 2) - kernel) // stride + 1


class DeepSpeech2(nn.Module):
    def __init__(self, hp: dict[str, Any]) -> None:
        super().__init__()
        c = hp["conv_channels"]
        self.k1, self.s1 = tuple(hp["conv1_kernel"]), tuple(hp["conv1_stride"])
        self.k2, self.s2 = tuple(hp["conv2_kernel"]), tuple(hp["conv2_stride"])
        bn = bool(hp["conv_batchnorm"])

        def block(cin: int, kernel: tuple[int, int], stride: tuple[int, int]) -> list[nn.Module]:
            padding = (kernel[0] // 2, kernel[1] // 2)
            layers: list[nn.Module] = [nn.Conv2d(cin, c, kernel, stride, padding, bias=not bn)]
            if bn:
                layers.append(nn.BatchNorm2d(c))
            layers.append(nn.Hardtanh(0.0, 20.0))
            return layers

        self.conv = nn.Sequential(*block(1, self.k1, self.s1), *block(c, self.k2, self.s2))
        freq = _conv_out(_conv_out(hp["frequency_bins"], self.k1[0], self.s1[0]), self.k2[0], self.s2[0])
        hidden = hp["rnn_hidden"]
        self.rnn = nn.GRU(c * freq, hidden, num_layers=hp["rnn_layers"], bidirectional=True)
        self.head = nn.Sequential(
            nn.Linear(2 * hidden, hp["fc_hidden"]), nn.ReLU(), nn.Linear(hp["fc_hidden"], len(hp["alphabet"]))
        )

    def output_lengths(self, frames: torch.Tensor) -> torch.Tensor:
        return _conv_out(_conv_out(frames, self.k1[1], self.s1[1]), self.k2[1], self.s2[1])

    def forward(self, features: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(features)                      # (N, C, F', T')
        n, c, f, t = x.shape
        x = x.reshape(n, c * f, t).permute(2, 0, 1)  # (T', N, C*F')
        lengths = self.output_lengths(frames).clamp(max=t)
        packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        x, _ = pad_packed_sequence(self.rnn(packed)[0], total_length=t)
        return self.head(x).log_softmax(dim=-1), lengths


@dataclass
class Training:
    model: DeepSpeech2
    optimizer: torch.optim.Optimizer
    loss: nn.CTCLoss
    clip_value: float


def build(hp: dict[str, Any], device: torch.device) -> Training:
    model = DeepSpeech2(hp).to(device)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )
    return Training(model, optimizer, nn.CTCLoss(blank=0, zero_infinity=True), hp["clip_gradient_value"])


def to_device(batch: Any, device: torch.device) -> dict[str, torch.Tensor]:
    non_blocking = device.type == "cuda"
    return {
        "features": torch.from_numpy(batch.features).to(device, non_blocking=non_blocking),
        "frames": torch.from_numpy(batch.feature_lengths).long(),
        "labels": torch.from_numpy(batch.labels).long().to(device, non_blocking=non_blocking),
        "label_lengths": torch.from_numpy(batch.label_lengths).long(),
    }


def forward(training: Training, inputs: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    """The network alone in inference mode (no loss, no update): log-probabilities (N, T', V) and
    output lengths (N,), as NumPy, to compare across frameworks."""
    model = training.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            log_probs, lengths = model(inputs["features"], inputs["frames"])
    finally:
        model.train(was_training)
    return log_probs.permute(1, 0, 2).cpu().numpy(), lengths.cpu().numpy()


def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    """One SGD step; `precision` supplies autocast() and a GradScaler (a no-op outside AMP)."""
    model, optimizer = training.model, training.optimizer
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        log_probs, lengths = model(inputs["features"], inputs["frames"])
    loss = training.loss(log_probs.float(), inputs["labels"], lengths, inputs["label_lengths"])
    amp.scaled_update(loss, optimizer, precision,
                      clip=lambda: nn.utils.clip_grad_value_(model.parameters(), training.clip_value))
    return loss.detach()
