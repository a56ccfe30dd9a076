"""Llama's input pipeline: packed sequences of seq_len token ids, from a synthetic token stream or
from a folder of pre-tokenized token files in nanoGPT's `.bin` layout (a flat array of token ids, no
header; uint16 when the vocabulary fits, else uint32).

Framework neutral (NumPy only). A batch holds (N, seq_len) input ids; the labels are the same ids
(the model shifts them by one, as LlamaForCausalLM's loss does), so each sequence trains on
seq_len - 1 next-token predictions and its work is seq_len tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import chosen, how_checked
from _shared.errors import DataError

Hparams = Mapping[str, Any]

LAYOUT = "*.bin token files (nanoGPT's layout: flat token ids, uint16 for a vocabulary of at most 65536, else uint32)"
SAMPLE_TOKENS = 1 << 20  # of each sampled file, the check before a run reads the first million tokens


@dataclass(frozen=True, eq=False)
class Batch:
    """(N, seq_len) int64 token ids."""

    input_ids: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def work(self) -> float:
        """Tokens in the batch (the throughput unit)."""
        return float(self.input_ids.size)

    @property
    def features(self) -> np.ndarray:
        return self.input_ids


def token_dtype(hp: Hparams) -> type[np.unsignedinteger[Any]]:
    """nanoGPT's rule: uint16 while every id fits, else uint32."""
    return np.uint16 if int(hp["vocab_size"]) <= 1 << 16 else np.uint32


def zipf_tokens(hp: Hparams, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Token ids drawn with Zipf frequencies over the vocabulary (natural text's rank-frequency law)."""
    vocab = int(hp["vocab_size"])
    weights = 1.0 / np.arange(1, vocab + 1) ** float(hp["zipf_exponent"])
    return rng.choice(vocab, size=shape, p=weights / weights.sum()).astype(np.int64)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    rng = np.random.default_rng(seed)
    while True:
        yield Batch(zipf_tokens(hp, rng, (batch_size, int(hp["seq_len"]))))


def token_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise DataError(f"data path {root} is not an existing folder: pass a folder holding {LAYOUT}")
    train = root / "train.bin"
    found = [train] if train.is_file() else sorted(p for p in root.glob("*.bin") if p.is_file())
    if not found:
        raise DataError(f"{root} holds no *.bin token files: pass a folder holding {LAYOUT}")
    return found


def open_tokens(path: Path, hp: Hparams) -> np.ndarray:
    """The file's tokens as a read-only memory map; a DataError when its size is not whole tokens or it
    holds fewer than one sequence."""
    dtype = np.dtype(token_dtype(hp))
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise DataError(f"{path} is {size} bytes, not a whole number of {dtype.name} tokens: write it as a flat "
                        f"{dtype.name} array (nanoGPT's layout for a vocabulary of {hp['vocab_size']})")
    if size // dtype.itemsize < int(hp["seq_len"]) + 1:
        raise DataError(f"{path} holds {size // dtype.itemsize} tokens, fewer than one sequence of "
                        f"{hp['seq_len']}: give it more tokens or remove it")
    return np.memmap(path, dtype=dtype, mode="r")


def real_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """nanoGPT's get_batch: each sequence starts at a random offset of a random file."""
    streams = [open_tokens(p, hp) for p in token_files(root)]
    rng, length = np.random.default_rng(seed), int(hp["seq_len"])
    while True:
        rows = []
        for f in rng.integers(0, len(streams), size=batch_size):
            stream = streams[int(f)]
            start = int(rng.integers(0, stream.size - length))
            rows.append(np.asarray(stream[start:start + length], dtype=np.int64))
        ids = np.stack(rows)
        if int(ids.max()) >= int(hp["vocab_size"]):
            raise DataError(f"a token id {int(ids.max())} in {root} is outside the vocabulary of {hp['vocab_size']}: "
                            f"tokenize with the model's vocabulary or set vocab_size")
        yield Batch(ids)


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or a folder of token files."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, real_batches)


def reference_batch(hp: Hparams) -> Batch:
    """One full sequence: the sample FLOPs per sample (and per token) are quoted for."""
    return next(synthetic_batches(hp, 1, 0))


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line: every file's size, and its
    token ids below vocab_size (all of every file when `full`, `tbdkit data prepare`; else the first million
    tokens of an even sample of them)."""
    if source == SYNTHETIC:
        return (f"synthetic token streams: sequences of {hp['seq_len']} Zipf-distributed ids over a vocabulary of "
                f"{hp['vocab_size']}")
    root = Path(source)
    files = token_files(root)
    streams = {p: open_tokens(p, hp) for p in files}
    read = chosen(files, full)
    for path in read:
        stream = streams[path]
        top = int(stream.max() if full else stream[:SAMPLE_TOKENS].max())
        if top >= int(hp["vocab_size"]):
            raise DataError(f"{path} holds token id {top}, outside the vocabulary of {hp['vocab_size']}: tokenize "
                            f"with the model's vocabulary (or set vocab_size), then check again")
    tokens = sum(s.size for s in streams.values())
    checked = how_checked(len(read), len(files), "files", ("read", "reads")) if full else (
        f"the first million tokens of {len(read)} of {len(files)} files read (`tbdkit data prepare` reads them all)")
    return f"token files at {root}: {len(files)} files, {tokens:,} {np.dtype(token_dtype(hp)).name} tokens; {checked}"
