"""Seq2Seq (NMT) input pipeline: IWSLT15 en-vi-shaped synthetic sentence pairs and the tokenized
parallel-text reader it shares with transformer (workloads/_shared/parallel_text.py).

Framework neutral (NumPy only). Batches hold padded id matrices; `work` is sentence pairs and
`extra_work` the tokens (source + target) for the tokens/s metric. `batches(source, hp,
batch_size, seed)` reads "synthetic" or a folder laid out as workload.toml's dataset_layout says.
`convergence_task` and `quality` are the converge preset's small real task (number words, below).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from _shared import parallel_text as _text

DataError = _text.DataError
Batch = _text.Batch
SYNTHETIC = _text.SYNTHETIC
batches, check_source = _text.entry_points("IWSLT15 en-vi")
synthetic_batches = _text.synthetic_batches
reference_batch = _text.reference_batch
input_shape = _text.input_shape
Hparams = Mapping[str, Any]


# --------------------------------------------------------------------------------------------
# The converge preset's small real task: English number words -> Vietnamese number words
#
# IWSLT15's language pair on a task that fits a CPU: the num2words package writes each number in
# English ("twenty-one thousand, three hundred and forty-five") and in Vietnamese ("hai mươi mốt
# nghìn ba trăm bốn mươi lăm"), and the network translates one into the other. Tokens are words:
# commas are stripped and hyphens split ("twenty-one" -> "twenty one"), so a tens-and-units pair is
# two source words as it is two or three target words. The vocabularies are the training
# sentences' words (sorted, after <unk> <s> </s>), as the NMT tutorial builds its vocab files from
# its training text; the preset states their sizes and the task checks them.

@dataclass(frozen=True, eq=False)
class ConvergenceTask:
    """Endless shuffled training batches, a fixed held-out set, and what they are."""

    train: Iterator[Batch]
    held_out: list[Batch]
    description: str


def tokenize_english(text: str) -> list[str]:
    """num2words' English as words: commas stripped, hyphenated tens-units split in two."""
    return text.replace(",", " ").replace("-", " ").split()


@lru_cache(maxsize=4)
def _number_words(low: int, high: int, train_count: int, held_count: int
                  ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[list[str], list[str]], ...]]:
    """Training and held-out numbers (distinct, drawn once from [low, high] by a fixed generator:
    the same split for every seed) and each number's (English words, Vietnamese words)."""
    try:
        from num2words import num2words
    except ImportError as e:
        raise DataError(f"the converge task writes numbers in words with the num2words package ({e}): "
                        "pip install num2words into the PyTorch stack (`tbdkit setup pytorch --force`)") from e
    if not 0 <= low <= high or train_count < 1 or held_count < 1 or train_count + held_count > high - low + 1:
        raise DataError(f"the converge preset asks for {train_count} training and {held_count} held-out numbers "
                        f"in [{low}, {high}]: set number_min <= number_max, with at least as many numbers in the "
                        f"range as train_numbers + held_out_numbers")
    numbers = low + np.random.default_rng(0).choice(high - low + 1, train_count + held_count, replace=False)
    words = tuple((tokenize_english(num2words(int(n), lang="en")), num2words(int(n), lang="vi").split())
                  for n in numbers)
    return numbers[held_count:], numbers[:held_count], words


def _task_vocab(sentences: Iterator[list[str]]) -> dict[str, int]:
    words = sorted({w for s in sentences for w in s} - set(_text.SPECIALS))
    return {t: i for i, t in enumerate([*_text.SPECIALS, *words])}


def _encode(words: list[str], vocab: dict[str, int]) -> np.ndarray:
    return np.array([vocab.get(w, _text.UNK_ID) for w in words], dtype=np.int64)


def convergence_task(source: str, hp: Hparams, batch_size: int, seed: int) -> ConvergenceTask:
    """Numbers in [number_min, number_max]: held_out_numbers of them held out (the same for every
    seed), train_numbers others in training batches reshuffled every epoch by `seed`."""
    if source != SYNTHETIC:
        raise DataError("the converge preset trains on its generated number-words task, not on a dataset path: "
                        "leave DATA unset")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    low, high = int(hp["number_min"]), int(hp["number_max"])
    train_numbers, held_numbers, words = _number_words(low, high, int(hp["train_numbers"]), int(hp["held_out_numbers"]))
    n_held = held_numbers.size
    held_words, train_words = words[:n_held], words[n_held:]
    src_vocab = _task_vocab(en for en, _ in train_words)
    tgt_vocab = _task_vocab(vi for _, vi in train_words)
    for side, vocab in (("source", src_vocab), ("target", tgt_vocab)):
        if len(vocab) != int(hp[f"{side}_vocab_size"]):
            raise DataError(f"the task's {side} vocabulary has {len(vocab)} entries with <unk> <s> </s>, but "
                            f"{side}_vocab_size is {hp[f'{side}_vocab_size']}: set {side}_vocab_size = {len(vocab)} "
                            f"in [preset.converge]")

    def encode(pairs: tuple[tuple[list[str], list[str]], ...]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return [_encode(en, src_vocab) for en, _ in pairs], [_encode(vi, tgt_vocab) for _, vi in pairs]

    held_src, held_tgt = encode(held_words)
    held_out = [_text.collate(held_src[i:i + batch_size], held_tgt[i:i + batch_size]) for i in range(0, n_held, batch_size)]
    train_src, train_tgt = encode(train_words)

    def batches() -> Iterator[Batch]:
        rng = np.random.default_rng(seed)
        order, at = rng.permutation(len(train_src)), 0
        while True:
            picked = []
            while len(picked) < batch_size:
                if at == order.size:
                    order, at = rng.permutation(len(train_src)), 0
                picked.append(int(order[at]))
                at += 1
            yield _text.collate([train_src[i] for i in picked], [train_tgt[i] for i in picked])

    return ConvergenceTask(batches(), held_out,
                           f"English -> Vietnamese number words written by num2words: {len(train_src)} training "
                           f"and {n_held} held-out numbers (disjoint) in {low:,}-{high:,}, word tokens, vocabularies "
                           f"of {len(src_vocab)} and {len(tgt_vocab)} entries")


def quality(outputs: list[tuple[np.ndarray, np.ndarray]], held_out: list[Batch]) -> float:
    """Held-out token accuracy with teacher forcing: the share of target tokens (each sentence's
    closing </s> included, padding excluded) where the log-probabilities' argmax is the token.
    `outputs` holds the workload's forward per batch: log-probabilities (N, T, V) and target lengths."""
    correct = total = 0
    for (log_probs, lengths), b in zip(outputs, held_out, strict=True):
        real = b.target_out >= 0
        if not np.array_equal(np.asarray(lengths), real.sum(axis=1)):
            raise ValueError("the outputs' target lengths do not match the held-out batch's")
        correct += int(((np.argmax(log_probs, axis=-1) == b.target_out) & real).sum())
        total += int(real.sum())
    return correct / total
