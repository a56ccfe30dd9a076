"""BERT data: synthetic masked-LM/next-sentence and SQuAD examples, WordPiece, and the readers of
text shards and SQuAD v1.1 JSON on tiny files the tests write in the real formats."""

import json
from pathlib import Path

import numpy as np
import pytest

from model_checks import hparams, load_data, workload_toml

data = load_data("bert")
TOML = workload_toml("bert")
HP = hparams("bert", "smoke")
PAPER = hparams("bert", "paper")
SQUAD = {**HP, **TOML["setting"]["squad"], "seq_len": 28, "max_query_length": 8, "doc_stride": 6}
CLS, SEP, MASK, PAD = 101, 102, 103, 0

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "it", "was", "happy", "very",
         "paris", "is", "capital", "of", "france", "what", "city", ".", "?", ",", "un", "##aff", "##able"]


def _vocab_lines() -> list[str]:
    """BERT's uncased layout: [PAD], [unused*], [UNK] [CLS] [SEP] [MASK] at 100-103, words from 999."""
    head = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return head + [f"[unused{i}]" for i in range(99, 99 + 999 - len(head))] + WORDS


def _write_vocab(root: Path) -> dict[str, int]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(_vocab_lines()) + "\n")
    return {t: i for i, t in enumerate(_vocab_lines())}


def _take(it, n):
    return [next(it) for _ in range(n)]


# ------------------------------------------------------------------------------------------
# Synthetic


@pytest.mark.parametrize("hp", [HP, PAPER], ids=["smoke", "paper"])
def test_synthetic_pretraining_examples(hp):
    batches = _take(data.batches("synthetic", hp, 32, seed=0), 4)
    short = 0
    masked = kept_or_random = 0
    for b in batches:
        assert b.input_ids.shape == b.token_type_ids.shape == b.attention_mask.shape == (32, hp["seq_len"])
        assert b.work == 32.0 and set(b.targets) == {"labels", "next_sentence_label"}
        assert set(np.unique(b.targets["next_sentence_label"])) <= {0, 1}
        for i in range(32):
            n = int(b.attention_mask[i].sum())
            ids, seg, labels = b.input_ids[i, :n], b.token_type_ids[i, :n], b.targets["labels"][i]
            assert ids[0] == CLS and ids[-1] == SEP and np.sum(ids == SEP) == 2
            assert np.all(b.input_ids[i, n:] == PAD) and np.all(labels[n:] == -100)
            first_sep = int(np.flatnonzero(ids == SEP)[0])
            assert np.all(seg[: first_sep + 1] == 0) and np.all(seg[first_sep + 1:] == 1)
            picked = np.flatnonzero(labels != -100)
            assert 1 <= picked.size <= hp["max_predictions_per_seq"]
            assert picked.size == min(hp["max_predictions_per_seq"], max(1, round(n * hp["masked_lm_prob"])))
            assert not np.isin(labels[picked], [CLS, SEP]).any() and labels[picked].min() >= hp["first_word_id"]
            masked += int(np.sum(ids[picked] == MASK))
            kept_or_random += int(np.sum(ids[picked] != MASK))
            short += n < hp["seq_len"]
    assert 0.7 < masked / (masked + kept_or_random) < 0.9          # 80% [MASK]
    assert 0 < short < 0.3 * 128                                      # short_seq_prob 0.1


def test_synthetic_is_deterministic():
    a, b = next(data.batches("synthetic", HP, 4, 5)), next(data.batches("synthetic", HP, 4, 5))
    np.testing.assert_array_equal(a.input_ids, b.input_ids)
    assert not np.array_equal(a.input_ids, next(data.batches("synthetic", HP, 4, 6)).input_ids)


def test_synthetic_squad_windows():
    for b in _take(data.batches("synthetic", {**PAPER, **TOML["setting"]["squad"]}, 8, seed=1), 2):
        assert b.input_ids.shape == (8, 384) and set(b.targets) == {"start_positions", "end_positions"}
        for i in range(8):
            ids = b.input_ids[i]
            context_start = int(np.flatnonzero(ids == SEP)[0]) + 1
            s, e = int(b.targets["start_positions"][i]), int(b.targets["end_positions"][i])
            assert context_start <= s <= e < 383 and e - s < 20
            assert b.token_type_ids[i, s] == 1 and np.all(b.attention_mask[i] == 1)


# ------------------------------------------------------------------------------------------
# WordPiece


def test_basic_words_and_wordpiece(tmp_path):
    vocab = _write_vocab(tmp_path)
    assert data.basic_words("The  Cat, sat! Naïve") == ["the", "cat", ",", "sat", "!", "naive"]
    assert data.wordpiece("unaffable", vocab, 100) == [vocab["un"], vocab["##aff"], vocab["##able"]]
    assert data.wordpiece("zebra", vocab, 100) == [100]
    assert data.tokenize("The cat, unaffable.", vocab, HP) == [vocab[w] for w in
                                                               ["the", "cat", ",", "un", "##aff", "##able", "."]]


def test_vocab_must_match_the_model(tmp_path):
    _write_vocab(tmp_path)
    assert len(data.read_vocab(tmp_path / "vocab.txt", HP)) == 999 + len(WORDS)
    with pytest.raises(data.DataError, match="has 1026 tokens but the model's vocab_size is 1000") as e:
        data.read_vocab(tmp_path / "vocab.txt", {**HP, "vocab_size": 1000})
    assert "at most 1000" in str(e.value)
    (tmp_path / "vocab.txt").write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(data.DataError, match=r"has \[PAD\] at line 1 but the model expects it at 0: use BERT"):
        data.read_vocab(tmp_path / "vocab.txt", HP)


# ------------------------------------------------------------------------------------------
# Text shards

DOCS = [["the cat sat on the mat.", "it was very happy.", "the dog ran far away."],
        ["paris is the capital of france.", "a cat sat.", "what city?"]]


def _shards(root: Path) -> dict[str, int]:
    vocab = _write_vocab(root)
    (root / "shard_00.txt").write_text("\n\n".join("\n".join(d) for d in DOCS) + "\n")
    return vocab


def _unmask(b, i):
    ids = b.input_ids[i].copy()
    labels = b.targets["labels"][i]
    ids[labels != -100] = labels[labels != -100]
    return ids[: int(b.attention_mask[i].sum())]


def test_pretraining_examples_come_from_the_shards(tmp_path):
    vocab = _shards(tmp_path)
    sentences = {tuple(data.tokenize(s, vocab, HP)): (d, k) for d, doc in enumerate(DOCS) for k, s in enumerate(doc)}
    hp = {**HP, "short_seq_prob": 0.0}
    labels_seen = set()
    for b in _take(data.batches(str(tmp_path), hp, 4, seed=2), 5):
        for i in range(4):
            ids = _unmask(b, i)
            sep = np.flatnonzero(ids == SEP)
            a, bb = ids[1: sep[0]].tolist(), ids[sep[0] + 1: sep[1]].tolist()
            first = next(v for k, v in sentences.items() if list(k) == a[: len(k)])   # A starts a sentence
            label = int(b.targets["next_sentence_label"][i])
            labels_seen.add(label)
            if label == 0:                                       # B is the text that follows A in its document
                doc = [t for s in DOCS[first[0]] for t in data.tokenize(s, vocab, HP)]
                start = len([t for s in DOCS[first[0]][: first[1]] for t in data.tokenize(s, vocab, HP)])
                assert doc[start: start + len(a) + len(bb)] == a + bb
    assert labels_seen == {0, 1}


def test_shard_splits_documents_and_tokenizes_on_first_use(tmp_path):
    vocab = _shards(tmp_path)
    shard = data.Shard(tmp_path / "shard_00.txt", vocab, HP)
    assert len(shard) == 2 and shard.raw == DOCS and not shard._pieces
    assert shard[1] == [data.tokenize(s, vocab, HP) for s in DOCS[1]] and list(shard._pieces) == [1]


def test_check_source_for_shards(tmp_path):
    _shards(tmp_path)
    assert data.check_source(str(tmp_path), HP).startswith(f"text shards at {tmp_path}: 1 files")
    assert data.check_source(str(tmp_path), HP, full=True).endswith("; all 1 shards decoded")


def test_a_shard_that_is_not_utf8_is_named_with_its_line(tmp_path):
    _shards(tmp_path)
    late = tmp_path / "shard_01.txt"
    late.write_bytes(b"a first sentence.\n" * 70_000 + b"caf\xe9 au lait.\n")  # past the first MiB
    sample = data.check_source(str(tmp_path), HP)
    assert "the first MiB of 2 of 2 shards decoded" in sample
    with pytest.raises(data.DataError, match="line 70001 is not UTF-8") as e:
        data.check_source(str(tmp_path), HP, full=True)
    assert str(late) in str(e.value) and "move shard_01.txt out of the folder" in str(e.value)
    late.write_bytes(b"caf\xe9 au lait.\n")
    with pytest.raises(data.DataError, match="shard_01.txt line 1 is not UTF-8"):
        data.check_source(str(tmp_path), HP)


def test_a_vocabulary_that_is_not_utf8_is_one_sentence(tmp_path):
    _shards(tmp_path)
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(vocab.read_bytes() + b"caf\xe9\n")
    with pytest.raises(data.DataError, match="vocab.txt line .* is not UTF-8 .*iconv"):
        data.check_source(str(tmp_path), HP)
    assert data.check_source("synthetic", HP).startswith("synthetic masked-LM")


def test_shard_errors_say_what_to_do(tmp_path):
    with pytest.raises(data.DataError, match="is not an existing folder: pass a folder holding"):
        data.check_source(str(tmp_path / "nope"), HP)
    tmp_path.joinpath("x.txt").write_text("hello\n")
    with pytest.raises(data.DataError, match="vocab.txt does not exist: pass a folder holding"):
        data.check_source(str(tmp_path), HP)
    tmp_path.joinpath("x.txt").unlink()
    _write_vocab(tmp_path)
    with pytest.raises(data.DataError, match=r"holds no \*.txt text shards"):
        data.check_source(str(tmp_path), HP)
    (tmp_path / "one.txt").write_text("just one sentence.\n")
    with pytest.raises(data.DataError, match="yield no sentence pairs"):
        next(data.batches(str(tmp_path), HP, 2, 0))


# ------------------------------------------------------------------------------------------
# SQuAD v1.1

CONTEXT = "The cat sat on the mat. It was very happy. Paris is the capital of France. The dog ran far away."


def _squad(root: Path, answer: str = "Paris", question: str = "What city is the capital of France?") -> dict:
    vocab = _write_vocab(root)
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "q1", "question": question, "answers": [{"text": answer, "answer_start": CONTEXT.index(answer)}]}]}]}]}
    (root / "train-v1.1.json").write_text(json.dumps(squad))
    return vocab


@pytest.mark.parametrize("answer", ["Paris", "capital of France", "dog ran far away."])
def test_squad_windows_hold_the_answer(tmp_path, answer):
    vocab = _squad(tmp_path, answer)
    want = data.tokenize(answer, vocab, SQUAD)
    (q,) = data.read_squad(tmp_path / "train-v1.1.json", vocab, SQUAD)
    assert q.pieces[q.start: q.end + 1] == want
    windows = list(data.question_windows(q, SQUAD))
    assert len(windows) >= 2                                  # the context is longer than one 28-token window
    found = 0
    for w in windows:
        s, e = w.targets["start_positions"], w.targets["end_positions"]
        assert w.ids.size <= SQUAD["seq_len"]
        if s:
            found += 1
            assert w.ids[s: e + 1].tolist() == want and w.segments[s] == 1
        else:
            assert e == 0
    assert found >= 1
    b = next(data.batches(str(tmp_path), SQUAD, 3, seed=0))
    assert b.input_ids.shape == (3, 28)
    assert data.check_source(str(tmp_path), SQUAD) == f"SQuAD v1.1 at {tmp_path / 'train-v1.1.json'}: 1 questions"


def test_squad_errors_say_what_to_do(tmp_path):
    _write_vocab(tmp_path)
    with pytest.raises(data.DataError, match="train-v1.1.json does not exist"):
        data.check_source(str(tmp_path), SQUAD)
    (tmp_path / "train-v1.1.json").write_text('{"data": [{"title": "x"}]}')
    with pytest.raises(data.DataError, match="is not SQuAD v1.1 JSON .*: pass the official train-v1.1.json"):
        data.check_source(str(tmp_path), SQUAD)
    (tmp_path / "train-v1.1.json").write_text('{"data": []}')
    with pytest.raises(data.DataError, match="holds no questions"):
        next(data.batches(str(tmp_path), SQUAD, 1, 0))
