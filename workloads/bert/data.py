"""BERT input pipeline: masked-LM + next-sentence examples and SQuAD v1.1 windows, synthetic or
read from real files with a WordPiece vocabulary.

Framework neutral (NumPy only). Every size comes from the hyperparameters `hp`. A batch holds
input ids, segment ids and the attention mask, plus `targets` named as BertForPreTraining /
BertForQuestionAnswering take them (labels + next_sentence_label, or start/end positions).
"""

import json
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC
from _shared.checks import chosen, how_checked, utf8_problem
from _shared.errors import DataError

Hparams = Mapping[str, Any]

SAMPLE_BYTES = 1 << 20  # of each sampled shard, the check before a run decodes the first MiB
IGNORE = -100
SPECIAL_TOKENS = {"pad_id": "[PAD]", "unk_id": "[UNK]", "cls_id": "[CLS]", "sep_id": "[SEP]", "mask_id": "[MASK]"}


@dataclass(frozen=True, eq=False)
class Batch:
    """(N, L) input_ids, token_type_ids, attention_mask (int64) and the task's targets."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    targets: dict[str, np.ndarray]

    @property
    def samples(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def work(self) -> float:
        """Sequences in the batch (the throughput unit)."""
        return float(self.samples)

    @property
    def features(self) -> np.ndarray:
        """The network's input array (token ids), whose per-sample shape `tbdkit describe` reports."""
        return self.input_ids


@dataclass(frozen=True)
class Example:
    """One sequence before batching: ids, segment ids and per-example targets."""

    ids: np.ndarray
    segments: np.ndarray
    targets: dict[str, Any]


def collate(examples: Sequence[Example], hp: Hparams) -> Batch:
    """Pad every example to hp["seq_len"]; token-level targets are padded with -100."""
    n, length = len(examples), int(hp["seq_len"])
    ids = np.full((n, length), hp["pad_id"], dtype=np.int64)
    segments, mask = np.zeros((n, length), dtype=np.int64), np.zeros((n, length), dtype=np.int64)
    targets: dict[str, np.ndarray] = {}
    for i, ex in enumerate(examples):
        k = ex.ids.size
        ids[i, :k], segments[i, :k], mask[i, :k] = ex.ids, ex.segments, 1
        for name, value in ex.targets.items():
            if isinstance(value, np.ndarray):
                targets.setdefault(name, np.full((n, length), IGNORE, dtype=np.int64))[i, :k] = value
            else:
                targets.setdefault(name, np.zeros(n, dtype=np.int64))[i] = value
    return Batch(ids, segments, mask, targets)


# --------------------------------------------------------------------------------------------
# Masked LM and next sentence


def pair_example(a: Sequence[int], b: Sequence[int], is_random_next: bool, rng: np.random.Generator,
                 hp: Hparams) -> Example:
    """[CLS] A [SEP] B [SEP] with masked-LM targets (create_pretraining_data.py's rule)."""
    ids = np.array([hp["cls_id"], *a, hp["sep_id"], *b, hp["sep_id"]], dtype=np.int64)
    segments = np.array([0] * (len(a) + 2) + [1] * (len(b) + 1), dtype=np.int64)
    candidates = np.flatnonzero(~np.isin(ids, [hp["cls_id"], hp["sep_id"]]))
    count = min(int(hp["max_predictions_per_seq"]), max(1, round(ids.size * hp["masked_lm_prob"])))
    picked = rng.permutation(candidates)[:count]
    labels = np.full(ids.size, IGNORE, dtype=np.int64)
    labels[picked] = ids[picked]
    roll = rng.random(picked.size)
    ids[picked[roll < 0.8]] = hp["mask_id"]                    # 80% [MASK]
    random = picked[roll >= 0.9]                               # 10% a random word piece; 10% kept
    ids[random] = rng.integers(hp["first_word_id"], hp["vocab_size"], random.size)
    return Example(ids, segments, {"labels": labels, "next_sentence_label": int(is_random_next)})


def _target_length(rng: np.random.Generator, hp: Hparams) -> int:
    most = int(hp["seq_len"]) - 3
    return int(rng.integers(2, most + 1)) if rng.random() < hp["short_seq_prob"] else most


def zipf_pieces(rng: np.random.Generator, n: int, hp: Hparams) -> np.ndarray:
    """`n` word-piece ids from [first_word_id, vocab_size) with Zipf-distributed frequencies."""
    words = int(hp["vocab_size"]) - int(hp["first_word_id"])
    p = np.arange(1, words + 1, dtype=np.float64) ** -float(hp["zipf_exponent"])
    idx = np.searchsorted(np.cumsum(p / p.sum()), rng.random(n), side="right")
    return np.minimum(idx, words - 1) + int(hp["first_word_id"])


def synthetic_pretraining(hp: Hparams, rng: np.random.Generator) -> Example:
    total = _target_length(rng, hp)
    split = int(rng.integers(1, total))
    pieces = zipf_pieces(rng, total, hp)
    return pair_example(pieces[:split].tolist(), pieces[split:].tolist(), bool(rng.random() < 0.5), rng, hp)


def synthetic_squad(hp: Hparams, rng: np.random.Generator) -> Example:
    """[CLS] question [SEP] context [SEP] filling the window, the answer a short span of the context."""
    q = int(np.clip(rng.poisson(hp["question_mean_tokens"]), 1, hp["max_query_length"]))
    c = int(hp["seq_len"]) - q - 3
    span = int(np.clip(rng.poisson(hp["answer_mean_tokens"]), 1, c))
    start = q + 2 + int(rng.integers(0, c - span + 1))
    return squad_window(zipf_pieces(rng, q, hp).tolist(), zipf_pieces(rng, c, hp).tolist(),
                        start - q - 2, start - q - 2 + span - 1, hp)


# --------------------------------------------------------------------------------------------
# WordPiece (BERT's uncased BasicTokenizer + WordpieceTokenizer)


def read_vocab(path: Path, hp: Hparams) -> dict[str, int]:
    """vocab.txt (one token per line, id = line number); DataError if it does not fit the model."""
    problem = utf8_problem(path)
    if problem is not None:
        raise DataError(f"{problem}, then check again")
    tokens = path.read_text(encoding="utf-8").splitlines()
    vocab = {t.strip(): i for i, t in enumerate(tokens) if t.strip()}
    for key, token in SPECIAL_TOKENS.items():
        if vocab.get(token) != hp[key]:
            raise DataError(f"{path} has {token} at line {vocab.get(token, 'none')} but the model expects it at "
                            f"{hp[key]}: use BERT's uncased vocab.txt or set {key} in workload.toml")
    if len(tokens) > int(hp["vocab_size"]):
        raise DataError(f"{path} has {len(tokens)} tokens but the model's vocab_size is {hp['vocab_size']}: "
                        f"use a vocabulary of at most {hp['vocab_size']} tokens or raise vocab_size")
    return vocab


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or \
        unicodedata.category(ch).startswith("P")


def basic_words(text: str) -> list[str]:
    """Lowercase, strip accents, split on whitespace and around punctuation."""
    text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    words: list[str] = []
    for chunk in text.split():
        current = ""
        for ch in chunk:
            if _is_punctuation(ch):
                words += [current, ch] if current else [ch]
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


def wordpiece(word: str, vocab: Mapping[str, int], unk_id: int) -> list[int]:
    """Greedy longest-match-first word pieces ("##" continues a word); [UNK] if none fits."""
    if len(word) > 100:
        return [unk_id]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and (("##" if start else "") + word[start:end]) not in vocab:
            end -= 1
        if end == start:
            return [unk_id]
        pieces.append(vocab[("##" if start else "") + word[start:end]])
        start = end
    return pieces


def tokenize(text: str, vocab: Mapping[str, int], hp: Hparams) -> list[int]:
    return [p for w in basic_words(text) for p in wordpiece(w, vocab, hp["unk_id"])]


# --------------------------------------------------------------------------------------------
# Pre-training text shards


class Shard:
    """The documents of one text shard (a sentence a line, blank lines between documents), word
    pieces computed the first time a document is used, so a large shard starts at once."""

    def __init__(self, path: Path, vocab: Mapping[str, int], hp: Hparams) -> None:
        docs: list[list[str]] = [[]]
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                docs[-1].append(line)
            elif docs[-1]:
                docs.append([])
        self.raw = [d for d in docs if d]
        self.vocab, self.hp = vocab, hp
        self._pieces: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, d: int) -> list[list[int]]:
        if d not in self._pieces:
            self._pieces[d] = [ids for ids in (tokenize(s, self.vocab, self.hp) for s in self.raw[d]) if ids]
        return self._pieces[d]


def _random_b(docs: Shard, skip: int, length: int, rng: np.random.Generator) -> list[int]:
    other = int(rng.integers(0, len(docs) - 1))
    doc = docs[other + (other >= skip)]
    start = int(rng.integers(0, len(doc))) if doc else 0
    return [t for s in doc[start:] for t in s][: max(length, 1)]


def document_examples(docs: Shard, d: int, rng: np.random.Generator, hp: Hparams) -> Iterator[Example]:
    """create_instances_from_document: chunks of sentences up to the target length, split into A and B."""
    doc, chunk, size = docs[d], [], 0
    target = _target_length(rng, hp)
    for i, sentence in enumerate(doc):
        chunk.append(sentence)
        size += len(sentence)
        if i < len(doc) - 1 and size < target:
            continue
        if len(chunk) >= 2 or len(docs) > 1:
            cut = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = [t for s in chunk[:cut] for t in s]
            random_next = len(chunk) == 1 or (len(docs) > 1 and rng.random() < 0.5)
            b = _random_b(docs, d, target - len(a), rng) if random_next else [t for s in chunk[cut:] for t in s]
            while len(a) + len(b) > target:                     # truncate the longer side
                longer = a if len(a) > len(b) else b
                del longer[0 if rng.random() < 0.5 else -1]
            if a and b:
                yield pair_example(a, b, random_next, rng, hp)
        chunk, size, target = [], 0, _target_length(rng, hp)


def _existing(root: Path, name: str, what: str) -> Path:
    if not root.is_dir():
        raise DataError(f"data path {root} is not an existing folder: pass a folder holding {what}")
    path = root / name
    if not path.is_file():
        raise DataError(f"{path} does not exist: pass a folder holding {what}")
    return path


PRETRAIN_LAYOUT = "*.txt text shards (a sentence per line, a blank line between documents) and vocab.txt"
SQUAD_LAYOUT = "train-v1.1.json (SQuAD v1.1) and vocab.txt"


def shards(root: Path, hp: Hparams) -> list[Path]:
    _existing(root, hp["vocab_file"], PRETRAIN_LAYOUT)
    found = sorted(p for p in root.glob("*.txt") if p.name != hp["vocab_file"])
    if not found:
        raise DataError(f"{root} holds no *.txt text shards: pass a folder holding {PRETRAIN_LAYOUT}")
    return found


def pretraining_examples(root: Path, hp: Hparams, rng: np.random.Generator) -> Iterator[Example]:
    """Endless examples, shard by shard in a shuffled order, documents shuffled within a shard."""
    files = shards(root, hp)
    vocab = read_vocab(root / hp["vocab_file"], hp)
    while True:
        produced = False
        for f in rng.permutation(len(files)):
            docs = Shard(files[int(f)], vocab, hp)
            for d in rng.permutation(len(docs)):
                for example in document_examples(docs, int(d), rng, hp):
                    produced = True
                    yield example
        if not produced:
            raise DataError(f"the shards in {root} yield no sentence pairs: give them documents of at least two "
                            f"sentences, or several documents")


# --------------------------------------------------------------------------------------------
# SQuAD v1.1


def squad_window(question: list[int], context: list[int], start: int, end: int, hp: Hparams) -> Example:
    """[CLS] q [SEP] context [SEP]; answer token positions (context indices) or 0/0 when outside."""
    offset = len(question) + 2
    ids = np.array([hp["cls_id"], *question, hp["sep_id"], *context, hp["sep_id"]], dtype=np.int64)
    segments = np.array([0] * offset + [1] * (len(context) + 1), dtype=np.int64)
    inside = 0 <= start and end < len(context)
    return Example(ids, segments, {"start_positions": start + offset if inside else 0,
                                   "end_positions": end + offset if inside else 0})


@dataclass(frozen=True)
class Question:
    question: list[int]
    pieces: list[int]          # the context's word pieces
    start: int                 # answer's first and last piece
    end: int


def _context_pieces(context: str, answer_start: int, answer: str, vocab: Mapping[str, int],
                    hp: Hparams) -> tuple[list[int], int, int]:
    """Word pieces of a paragraph and the piece span of the answer (run_squad.py's alignment)."""
    words, char_to_word, prev_space = [], [], True
    for ch in context:
        if ch.isspace():
            prev_space = True
        else:
            if prev_space:
                words.append("")
            words[-1] += ch
            prev_space = False
        char_to_word.append(max(len(words) - 1, 0))
    first_word, last_word = char_to_word[answer_start], char_to_word[answer_start + len(answer) - 1]
    pieces, word_start = [], []
    for w in words:
        word_start.append(len(pieces))
        pieces += tokenize(w, vocab, hp)
    end = (word_start[last_word + 1] if last_word + 1 < len(words) else len(pieces)) - 1
    return pieces, *_improve_span(pieces, word_start[first_word], end, tokenize(answer, vocab, hp))


def _improve_span(pieces: list[int], start: int, end: int, answer: list[int]) -> tuple[int, int]:
    """run_squad.py's _improve_answer_span: the sub-span of whole words that is exactly the answer
    ("France" inside "France.")."""
    for s in range(start, end + 1):
        for e in range(end, s - 1, -1):
            if pieces[s : e + 1] == answer:
                return s, e
    return start, end


def read_squad(path: Path, vocab: Mapping[str, int], hp: Hparams) -> list[Question]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        questions = []
        for article in data:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    answer = qa["answers"][0]
                    pieces, start, end = _context_pieces(paragraph["context"], int(answer["answer_start"]),
                                                         answer["text"], vocab, hp)
                    q = tokenize(qa["question"], vocab, hp)[: int(hp["max_query_length"])]
                    questions.append(Question(q, pieces, start, end))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise DataError(f"{path} is not SQuAD v1.1 JSON ({type(e).__name__}: {e}): pass the official "
                        f"train-v1.1.json") from e
    if not questions:
        raise DataError(f"{path} holds no questions: pass the official train-v1.1.json")
    return questions


def question_windows(q: Question, hp: Hparams) -> Iterator[Example]:
    """Sliding windows of doc_stride over a long context, as run_squad.py makes them."""
    room = int(hp["seq_len"]) - len(q.question) - 3
    start = 0
    while True:
        yield squad_window(q.question, q.pieces[start:start + room], q.start - start, q.end - start, hp)
        if start + room >= len(q.pieces):
            return
        start += min(room, int(hp["doc_stride"]))


def squad_examples(root: Path, hp: Hparams, rng: np.random.Generator) -> Iterator[Example]:
    path = _existing(root, hp["squad_file"], SQUAD_LAYOUT)
    questions = read_squad(path, read_vocab(_existing(root, hp["vocab_file"], SQUAD_LAYOUT), hp), hp)
    while True:
        for i in rng.permutation(len(questions)):
            yield from question_windows(questions[int(i)], hp)


# --------------------------------------------------------------------------------------------
# Entry points


def _task(hp: Hparams) -> str:
    if hp["task"] not in ("pretraining", "squad"):
        raise ValueError(f"hp['task'] must be 'pretraining' or 'squad', got {hp['task']!r}")
    return str(hp["task"])


def _examples(source: str, hp: Hparams, rng: np.random.Generator) -> Iterator[Example]:
    squad = _task(hp) == "squad"
    if source == SYNTHETIC:
        make = synthetic_squad if squad else synthetic_pretraining
        return iter(lambda: make(hp, rng), None)
    return (squad_examples if squad else pretraining_examples)(Path(source), hp, rng)


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or a real folder (text shards or SQuAD, by hp["task"])."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    examples = _examples(source, hp, np.random.default_rng(seed))
    while True:
        yield collate([next(examples) for _ in range(batch_size)], hp)


def reference_batch(hp: Hparams) -> Batch:
    """One full-length synthetic sequence (no padding): the sample FLOPs per sample are quoted for."""
    rng = np.random.default_rng(0)
    make = synthetic_squad if _task(hp) == "squad" else synthetic_pretraining
    while True:
        example = make(hp, rng)
        if example.ids.size == int(hp["seq_len"]):
            return collate([example], hp)


def probe_batch(hp: Hparams) -> Batch:
    """Two synthetic sequences (seed 0): `tbdkit describe --save` compares the frameworks' outputs on them."""
    return next(batches(SYNTHETIC, hp, 2, seed=0))


def check_shards(files: list[Path], full: bool) -> str:
    """Decode every shard whole (`full`) or the first MiB of an even sample of them; a DataError
    names the first line that is not UTF-8. Returns what was decoded."""
    decoded = chosen(files, full)
    for path in decoded:
        problem = utf8_problem(path, None if full else SAMPLE_BYTES)
        if problem is not None:
            raise DataError(f"{problem} (or move {path.name} out of the folder), then check again")
    if full:
        return how_checked(len(decoded), len(files), "shards")
    return f"the first MiB of {len(decoded)} of {len(files)} shards decoded (`tbdkit data prepare` decodes them all)"


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    shard when `full` (`tbdkit data prepare`), else the start of a sample (the check before a run)."""
    squad = _task(hp) == "squad"
    if source == SYNTHETIC:
        what = "SQuAD-like question/context windows" if squad else "masked-LM + next-sentence pairs"
        return f"synthetic {what} of {hp['seq_len']} tokens over {hp['vocab_size']} Zipf-distributed word pieces"
    root = Path(source)
    if squad:
        path = _existing(root, hp["squad_file"], SQUAD_LAYOUT)
        questions = read_squad(path, read_vocab(_existing(root, hp["vocab_file"], SQUAD_LAYOUT), hp), hp)
        return f"SQuAD v1.1 at {path}: {len(questions)} questions"
    files = shards(root, hp)
    read_vocab(root / hp["vocab_file"], hp)
    return (f"text shards at {root}: {len(files)} files, {sum(f.stat().st_size for f in files) / 2**20:.1f} MiB; "
            f"{check_shards(files, full)}")
