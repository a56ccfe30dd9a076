"""Parallel text for the translation workloads (seq2seq, transformer): vocabularies, synthetic
sentence pairs of a corpus's shape, and a reader for tokenized parallel files.

Framework neutral (NumPy only). Layout of a real corpus folder: one source file and one target
file, aligned line by line, one tokenized sentence per line (tokens separated by spaces, BPE
already applied where the model uses it), and a vocabulary file per side (one token per line; a
second whitespace-separated field such as a count is ignored). The file names come from the
hyperparameters (`source_file`, `target_file`, `source_vocab`, `target_vocab`).

Token ids follow the TensorFlow NMT tutorial: 0 <unk>, 1 <s>, 2 </s>, then the vocabulary file's
tokens; missing special tokens are put in front, as the tutorial's check_vocab does. Padding is
masked by the lengths (sources padded with </s>, labels with -100), so no id is spent on it.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import utf8_problem
from _shared.errors import DataError

Hparams = Mapping[str, Any]

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
SPECIALS = (UNK, BOS, EOS)
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
IGNORE = -100  # label of padded target positions (PyTorch's cross-entropy ignore_index)
CHUNK_BYTES = 1 << 26  # line_offsets reads 64 MiB at a time: WMT14's 600 MB sides never sit in memory whole


@dataclass(frozen=True, eq=False)
class Batch:
    """Sentence pairs: sources (N, S) padded with </s>, decoder inputs <s> y (N, T), labels y </s> (N, T)."""

    source: np.ndarray
    source_lengths: np.ndarray
    target_in: np.ndarray
    target_out: np.ndarray
    target_lengths: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.source.shape[0])

    @property
    def work(self) -> float:
        """Sentence pairs in the batch (the throughput unit)."""
        return float(self.samples)

    @property
    def extra_work(self) -> dict[str, float]:
        """Tokens trained on: source tokens plus target tokens (each target counts its </s>)."""
        return {"tokens": float(self.source_lengths.sum() + self.target_lengths.sum())}

    @property
    def padded_work(self) -> float:
        """Sentence pairs as the step computes them: in tokens, every pair padded to the longest source and
        target, per sentence pair of the batch's mean real length (warm-up's cost unit)."""
        real = float(self.source_lengths.sum() + self.target_lengths.sum())
        return self.work * (self.source.size + self.target_in.size) / max(real, 1.0)


def collate(sources: list[np.ndarray], targets: list[np.ndarray]) -> Batch:
    """Pad id sequences into a Batch; a target y becomes inputs <s> y and labels y </s>."""
    n = len(sources)
    src_len = np.array([s.size for s in sources], dtype=np.int64)
    tgt_len = np.array([t.size + 1 for t in targets], dtype=np.int64)
    src = np.full((n, int(src_len.max())), EOS_ID, dtype=np.int64)
    t_in = np.full((n, int(tgt_len.max())), EOS_ID, dtype=np.int64)
    t_out = np.full((n, int(tgt_len.max())), IGNORE, dtype=np.int64)
    for i, (s, t) in enumerate(zip(sources, targets)):
        src[i, : s.size] = s
        t_in[i, 0], t_in[i, 1 : t.size + 1] = BOS_ID, t
        t_out[i, : t.size], t_out[i, t.size] = t, EOS_ID
    return Batch(src, src_len, t_in, t_out, tgt_len)


# --------------------------------------------------------------------------------------------
# Synthetic sentence pairs


@lru_cache(maxsize=8)
def _zipf_cdf(vocab_size: int, exponent: float) -> np.ndarray:
    ranks = np.arange(1, vocab_size - len(SPECIALS) + 1, dtype=np.float64)
    p = ranks ** -exponent
    return np.cumsum(p / p.sum())


def synthetic_tokens(rng: np.random.Generator, n: int, vocab_size: int, exponent: float) -> np.ndarray:
    """`n` word ids (never a special token) with Zipf-distributed frequencies, as in real text."""
    idx = np.searchsorted(_zipf_cdf(vocab_size, exponent), rng.random(n), side="right")
    return (np.minimum(idx, vocab_size - len(SPECIALS) - 1) + len(SPECIALS)).astype(np.int64)


def synthetic_lengths(rng: np.random.Generator, n: int, hp: Hparams) -> np.ndarray:
    """Source lengths in tokens: gamma with the corpus's mean, clipped to [1, max_length]."""
    mean, shape = float(hp["length_mean"]), float(hp["length_gamma_shape"])
    raw = rng.gamma(shape, mean / shape, n)
    return np.clip(np.rint(raw), 1, int(hp["max_length"])).astype(np.int64)


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless synthetic sentence pairs, deterministic for `seed`; targets ~ target_length_ratio x source."""
    rng = np.random.default_rng(seed)
    z = float(hp["zipf_exponent"])
    while True:
        src_len = synthetic_lengths(rng, batch_size, hp)
        ratio = hp["target_length_ratio"] * rng.lognormal(0.0, 0.15, batch_size)
        tgt_len = np.clip(np.rint(src_len * ratio), 1, int(hp["max_length"])).astype(np.int64)
        sources = [synthetic_tokens(rng, int(k), int(hp["source_vocab_size"]), z) for k in src_len]
        targets = [synthetic_tokens(rng, int(k), int(hp["target_vocab_size"]), z) for k in tgt_len]
        yield collate(sources, targets)


def reference_batch(hp: Hparams) -> Batch:
    """The one sentence pair FLOPs per sample are quoted for: a source of the mean synthetic length
    (length_mean tokens) and a target of target_length_ratio x that, Zipf tokens from seed 0."""
    rng = np.random.default_rng(0)
    src_len = int(np.clip(round(float(hp["length_mean"])), 1, int(hp["max_length"])))
    tgt_len = int(np.clip(round(src_len * float(hp["target_length_ratio"])), 1, int(hp["max_length"])))
    z = float(hp["zipf_exponent"])
    return collate([synthetic_tokens(rng, src_len, int(hp["source_vocab_size"]), z)],
                   [synthetic_tokens(rng, tgt_len, int(hp["target_vocab_size"]), z)])


def input_shape(batch: Batch, hp: Hparams) -> list[int]:
    """One sentence pair's input as `tbdkit describe` reports it: its source and target lengths (the
    target counts its </s>), of the batch's first pair."""
    return [int(batch.source_lengths[0]), int(batch.target_lengths[0])]


# --------------------------------------------------------------------------------------------
# Tokenized parallel files


def _layout_hint(hp: Hparams) -> str:
    return (f"pass a folder holding {hp['source_file']} and {hp['target_file']} (aligned, one tokenized "
            f"sentence per line) and the vocabularies {hp['source_vocab']} and {hp['target_vocab']}")


def _require_utf8(path: Path, more: str = "") -> None:
    """A DataError naming the first line of `path` that is not UTF-8 and the fix (`more` adds to it)."""
    problem = utf8_problem(path)
    if problem is not None:
        raise DataError(f"{problem}{more}, then check again")


def read_vocab(path: Path, limit: int) -> dict[str, int]:
    """Token -> id for a vocabulary file (first field of each line), specials first; at most `limit` ids."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        _require_utf8(path)
        raise
    tokens = [line.split()[0] for line in text.splitlines() if line.strip()]
    ordered = list(SPECIALS) + [t for t in dict.fromkeys(tokens) if t not in SPECIALS]
    if len(ordered) > limit:
        raise DataError(
            f"vocabulary {path} has {len(ordered)} entries with <unk>, <s>, </s> but the model has {limit}: "
            f"use a vocabulary of at most {limit} entries or raise the vocabulary size in workload.toml"
        )
    return {t: i for i, t in enumerate(ordered)}


def line_offsets(path: Path) -> np.ndarray:
    """Byte offsets where each line starts, plus the end of the file (len = lines + 1)."""
    size = path.stat().st_size
    if size == 0:
        return np.zeros(1, dtype=np.int64)
    found = []
    with path.open("rb") as f:
        for base in range(0, size, CHUNK_BYTES):
            chunk = np.frombuffer(f.read(CHUNK_BYTES), dtype=np.uint8)
            found.append(np.flatnonzero(chunk == 10).astype(np.int64) + base + 1)  # a line starts after each \n
    starts = np.concatenate([np.zeros(1, np.int64), *found])
    return starts if starts[-1] == size else np.append(starts, size)


@dataclass(frozen=True)
class Corpus:
    """A parallel corpus on disk: its files, line offsets and vocabularies."""

    source: Path
    target: Path
    source_offsets: np.ndarray
    target_offsets: np.ndarray
    source_vocab: dict[str, int]
    target_vocab: dict[str, int]

    @property
    def pairs(self) -> int:
        return int(self.source_offsets.size - 1)


def _existing(root: Path, name: str, hp: Hparams) -> Path:
    path = root / name
    if not path.is_file():
        raise DataError(f"{path} does not exist: {_layout_hint(hp)}")
    return path


def open_corpus(root: Path, hp: Hparams) -> Corpus:
    """Check the folder's layout and index its lines (DataError with the fix when it is wrong)."""
    if not root.is_dir():
        raise DataError(f"data path {root} is not an existing folder: {_layout_hint(hp)}")
    src, tgt = _existing(root, hp["source_file"], hp), _existing(root, hp["target_file"], hp)
    s_off, t_off = line_offsets(src), line_offsets(tgt)
    if s_off.size != t_off.size:
        raise DataError(
            f"{src} has {s_off.size - 1} lines but {tgt} has {t_off.size - 1}: the two sides must be "
            f"aligned line by line, so fix or re-extract the corpus"
        )
    if s_off.size < 2:
        raise DataError(f"{src} is empty: {_layout_hint(hp)}")
    return Corpus(src, tgt, s_off, t_off,
                  read_vocab(_existing(root, hp["source_vocab"], hp), int(hp["source_vocab_size"])),
                  read_vocab(_existing(root, hp["target_vocab"], hp), int(hp["target_vocab_size"])))


def encode(line: bytes, vocab: Mapping[str, int], max_length: int) -> np.ndarray:
    """Token ids of one tokenized line, unknown tokens as <unk>, truncated to max_length (as NMT does)."""
    words = line.decode("utf-8", errors="replace").split()[:max_length]
    return np.array([vocab.get(w, UNK_ID) for w in words], dtype=np.int64)


def _line(mm: mmap.mmap, offsets: np.ndarray, i: int) -> bytes:
    return mm[int(offsets[i]) : int(offsets[i + 1])]


def file_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of the corpus's sentence pairs, reshuffled every epoch by `seed`; pairs
    with an empty side are skipped."""
    corpus = open_corpus(Path(root), hp)
    rng = np.random.default_rng(seed)
    max_len = int(hp["max_length"])
    with corpus.source.open("rb") as fs, corpus.target.open("rb") as ft, \
            mmap.mmap(fs.fileno(), 0, access=mmap.ACCESS_READ) as ms, \
            mmap.mmap(ft.fileno(), 0, access=mmap.ACCESS_READ) as mt:
        sources: list[np.ndarray] = []
        targets: list[np.ndarray] = []
        while True:
            found = False
            for i in rng.permutation(corpus.pairs):
                s = encode(_line(ms, corpus.source_offsets, int(i)), corpus.source_vocab, max_len)
                t = encode(_line(mt, corpus.target_offsets, int(i)), corpus.target_vocab, max_len)
                if s.size == 0 or t.size == 0:
                    continue
                found = True
                sources.append(s)
                targets.append(t)
                if len(sources) == batch_size:
                    yield collate(sources, targets)
                    sources, targets = [], []
            if not found:
                raise DataError(f"every line pair in {corpus.source} and {corpus.target} has an empty side: "
                                f"{_layout_hint(hp)}")


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from a folder of tokenized parallel text."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, file_batches)


def describe_synthetic(hp: Hparams, corpus: str) -> str:
    return (f"synthetic {corpus}-like sentence pairs: source lengths gamma(mean {hp['length_mean']:g}) in "
            f"1-{hp['max_length']} tokens, targets ~{hp['target_length_ratio']:g}x, Zipf({hp['zipf_exponent']:g}) "
            f"tokens over {hp['source_vocab_size']}/{hp['target_vocab_size']} ids")


BLANK_CANDIDATE_BYTES = 64  # a line this short may hold only whitespace; longer lines are read only to decode


def blank_lines(path: Path, offsets: np.ndarray) -> np.ndarray:
    """Per line of `path` (offsets from line_offsets): True where it holds no token."""
    lengths = np.diff(offsets)
    blank = np.zeros(lengths.size, dtype=bool)
    with path.open("rb") as f:
        for i in np.flatnonzero(lengths <= BLANK_CANDIDATE_BYTES):
            f.seek(int(offsets[i]))
            blank[i] = not f.read(int(lengths[i])).split()
    return blank


def describe_corpus(root: Path, hp: Hparams) -> str:
    """Check the corpus as training reads it, every line (its UTF-8, its empty pairs), and describe it.
    Every byte is read anyway to index the lines, so the check before a run is as thorough as
    `tbdkit data prepare`'s."""
    c = open_corpus(root, hp)
    for path in (c.source, c.target):
        _require_utf8(path, f" (or delete the pair from both {c.source.name} and {c.target.name})")
    empty = np.flatnonzero(blank_lines(c.source, c.source_offsets) | blank_lines(c.target, c.target_offsets))
    if empty.size == c.pairs:
        raise DataError(f"every line pair in {c.source} and {c.target} has an empty side: {_layout_hint(hp)}")
    skipped = (f"; {empty.size} of them have an empty side and are skipped (first: line {int(empty[0]) + 1})"
               if empty.size else "")
    return (f"parallel text at {root}: {c.pairs} sentence pairs ({c.source.name} -> {c.target.name}), "
            f"vocabularies of {len(c.source_vocab)} and {len(c.target_vocab)} entries; all lines are UTF-8{skipped}")


def entry_points(corpus_name: str) -> tuple[Any, Any]:
    """A workload data module's `batches` and `check_source` for a corpus of this kind."""

    def check_source(source: str, hp: Hparams, full: bool = False) -> str:
        """Validate the data source up front (DataError) and describe it in one line; text is
        checked whole either way (`full`, data prepare's thoroughness, changes nothing here)."""
        if source == SYNTHETIC:
            return describe_synthetic(hp, corpus_name)
        return describe_corpus(Path(source), hp)

    return batches, check_source
