"""The translation workloads' data (transformer, seq2seq): synthetic sentence pairs and the reader
of tokenized parallel text, on tiny corpora the tests write in the real layout."""

from pathlib import Path

import numpy as np
import pytest

from model_checks import hparams as _hp, load_data

MODELS = ["transformer", "seq2seq"]


@pytest.fixture(params=MODELS)
def model(request):
    return request.param


@pytest.fixture
def data(model):
    return load_data(model)


def _take(it, n):
    return [next(it) for _ in range(n)]


# ------------------------------------------------------------------------------------------
# Synthetic pairs


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_synthetic_batches_have_the_real_shapes(model, data, preset):
    hp = _hp(model, preset)
    for b in _take(data.batches("synthetic", hp, 16, seed=1), 3):
        n = b.samples
        assert n == 16 and b.work == 16.0
        assert b.source.shape == (n, int(b.source_lengths.max())) and b.source.dtype == np.int64
        assert b.target_in.shape == b.target_out.shape == (n, int(b.target_lengths.max()))
        assert b.source_lengths.max() <= hp["max_length"] and b.source_lengths.min() >= 1
        assert b.target_lengths.max() <= hp["max_length"] + 1  # + </s>
        assert b.extra_work == {"tokens": float(b.source_lengths.sum() + b.target_lengths.sum())}
        for i in range(n):
            s, t = int(b.source_lengths[i]), int(b.target_lengths[i])
            words = b.source[i, :s]
            assert words.min() >= 3 and words.max() < hp["source_vocab_size"]
            assert np.all(b.source[i, s:] == 2)                       # padded with </s>
            assert b.target_in[i, 0] == 1                             # <s> y
            np.testing.assert_array_equal(b.target_in[i, 1:t], b.target_out[i, : t - 1])
            assert b.target_out[i, t - 1] == 2 and np.all(b.target_out[i, t:] == -100)
            assert b.target_out[i, : t - 1].max() < hp["target_vocab_size"]


def test_synthetic_is_deterministic_and_zipfian(model, data):
    hp = _hp(model, "paper")
    a, b = _take(data.batches("synthetic", hp, 8, 3), 2), _take(data.batches("synthetic", hp, 8, 3), 2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.source, y.source)
    other = next(data.batches("synthetic", hp, 8, 4))
    assert not np.array_equal(a[0].source_lengths, other.source_lengths)
    lengths = np.concatenate([x.source_lengths for x in _take(data.batches("synthetic", hp, 64, 0), 20)])
    assert abs(lengths.mean() - hp["length_mean"]) < 0.1 * hp["length_mean"]
    ids = data._text.synthetic_tokens(np.random.default_rng(0), 50_000, hp["source_vocab_size"], 1.0)
    counts = np.bincount(ids, minlength=hp["source_vocab_size"])
    assert counts[3] > counts[4] > counts[10] > counts[1000] and counts[:3].sum() == 0


def test_check_source_synthetic(model, data):
    text = data.check_source("synthetic", _hp(model, "paper"))
    assert text.startswith("synthetic") and str(_hp(model, "paper")["source_vocab_size"]) in text


# ------------------------------------------------------------------------------------------
# Tokenized parallel files

PAIRS = [("the cat sat", "die katze sass"), ("a dog", "ein hund"), ("hello world again today", "hallo welt"),
         ("", "leer"), ("unknownword cat", "katze unbekannt")]


def _corpus(root: Path, hp: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / hp["source_file"]).write_text("\n".join(s for s, _ in PAIRS) + "\n")
    (root / hp["target_file"]).write_text("\n".join(t for _, t in PAIRS))   # no final newline
    src_words = ["the", "cat", "sat", "a", "dog", "hello", "world", "again", "today"]
    tgt_words = ["die", "katze", "sass", "ein", "hund", "hallo", "welt", "leer"]
    # The NMT tutorial's vocab files start with the specials; a count column (fairseq) is ignored.
    (root / hp["source_vocab"]).write_text("<unk>\n<s>\n</s>\n" + "".join(f"{w} 12\n" for w in src_words))
    if hp["target_vocab"] != hp["source_vocab"]:
        (root / hp["target_vocab"]).write_text("".join(f"{w}\n" for w in tgt_words))
    else:
        with (root / hp["source_vocab"]).open("a") as f:
            f.write("".join(f"{w}\n" for w in tgt_words))
    return root


def _decode(ids, vocab):
    inverse = {i: w for w, i in vocab.items()}
    return " ".join(inverse[int(i)] for i in ids)


def test_reader_yields_every_nonempty_pair_once_per_epoch(model, data, tmp_path):
    hp = {**_hp(model, "smoke"), "max_length": 3}
    root = _corpus(tmp_path / "corpus", hp)
    corpus = data._text.open_corpus(root, hp)
    assert corpus.pairs == 5
    assert list(corpus.source_vocab)[:4] == ["<unk>", "<s>", "</s>", "the"]
    shared = hp["source_vocab"] == hp["target_vocab"]
    assert list(corpus.target_vocab)[:4] == ["<unk>", "<s>", "</s>", "the" if shared else "die"]
    seen = []
    for b in _take(data.batches(str(root), hp, 2, seed=5), 4):
        assert b.samples == 2 and b.work == 2.0
        for i in range(2):
            src = _decode(b.source[i, : b.source_lengths[i]], corpus.source_vocab)
            tgt = _decode(b.target_out[i, : b.target_lengths[i] - 1], corpus.target_vocab)
            assert b.target_out[i, b.target_lengths[i] - 1] == 2
            seen.append((src, tgt))
    # 4 non-empty pairs, two epochs; truncated to max_length 3; unknown tokens become <unk>
    expected = [("the cat sat", "die katze sass"), ("a dog", "ein hund"), ("hello world again", "hallo welt"),
                ("<unk> cat", "katze <unk>")]
    assert sorted(seen[:4]) == sorted(expected) and sorted(seen[4:]) == sorted(expected)
    first = next(data.batches(str(root), hp, 2, seed=5))
    np.testing.assert_array_equal(first.source, next(data.batches(str(root), hp, 2, seed=5)).source)


def test_check_source_describes_the_corpus(model, data, tmp_path):
    hp = _hp(model, "smoke")
    root = _corpus(tmp_path / "c", hp)
    text = data.check_source(str(root), hp)
    assert f"{root}: 5 sentence pairs" in text and hp["source_file"] in text
    assert text.endswith("; all lines are UTF-8; 1 of them have an empty side and are skipped (first: line 4)")


def test_undecodable_bytes_name_the_file_and_line(model, data, tmp_path):
    hp = _hp(model, "smoke")
    root = _corpus(tmp_path / "c", hp)
    target = root / hp["target_file"]
    lines = target.read_bytes().split(b"\n")
    lines[2] = "hallo w\xe9lt".encode("latin-1")  # a Latin-1 file where UTF-8 is expected
    target.write_bytes(b"\n".join(lines))
    with pytest.raises(data.DataError, match="line 3 is not UTF-8") as e:
        data.check_source(str(root), hp)
    assert str(target) in str(e.value) and "iconv -f LATIN1 -t UTF-8" in str(e.value)
    vocab = root / hp["source_vocab"]
    vocab.write_bytes(vocab.read_bytes() + b"caf\xe9\n")
    with pytest.raises(data.DataError, match="line .* is not UTF-8") as e:
        data.check_source(str(root), hp)
    assert str(vocab) in str(e.value) and "Traceback" not in str(e.value)


def test_blank_and_whitespace_lines_count_as_empty_sides(model, data, tmp_path):
    hp = _hp(model, "smoke")
    root = _corpus(tmp_path / "c", hp)
    (root / hp["target_file"]).write_text("die katze sass\n \t \nhallo welt\nleer\n\n")
    text = data.check_source(str(root), hp)
    assert "3 of them have an empty side and are skipped (first: line 2)" in text


def test_layout_errors_say_what_to_do(model, data, tmp_path):
    hp = _hp(model, "smoke")
    with pytest.raises(data.DataError, match="is not an existing folder") as e:
        data.check_source(str(tmp_path / "nope"), hp)
    assert hp["source_file"] in str(e.value) and hp["target_vocab"] in str(e.value)
    root = _corpus(tmp_path / "c", hp)
    (root / hp["target_file"]).unlink()
    with pytest.raises(data.DataError, match=f"{hp['target_file']} does not exist: pass a folder"):
        data.check_source(str(root), hp)
    (root / hp["target_file"]).write_text("one\ntwo\n")
    with pytest.raises(data.DataError, match="has 5 lines but .* has 2: the two sides must be aligned"):
        next(data.batches(str(root), hp, 2, seed=0))


def test_vocabulary_larger_than_the_model_is_a_data_error(model, data, tmp_path):
    hp = {**_hp(model, "smoke"), "source_vocab_size": 6}
    root = _corpus(tmp_path / "c", hp)
    entries = 20 if hp["source_vocab"] == hp["target_vocab"] else 12
    with pytest.raises(data.DataError, match=f"has {entries} entries with <unk>, <s>, </s> but the model has 6") as e:
        data.check_source(str(root), hp)
    assert "at most 6 entries" in str(e.value)


def test_corpus_without_a_usable_pair_is_a_data_error(model, data, tmp_path):
    hp = _hp(model, "smoke")
    root = _corpus(tmp_path / "c", hp)
    (root / hp["source_file"]).write_text("\n\n")
    (root / hp["target_file"]).write_text("a\nb\n")
    with pytest.raises(data.DataError, match="every line pair .* has an empty side"):
        next(data.batches(str(root), hp, 2, seed=0))


@pytest.mark.parametrize("chunk", [3, 1 << 26])
@pytest.mark.parametrize("text", ["a\nbb\n\nccc\n", "a\nbb", "", "\n", "x"])
def test_line_offsets_split_lines_across_read_chunks(data, tmp_path, monkeypatch, text, chunk):
    monkeypatch.setattr(data._text, "CHUNK_BYTES", chunk)
    path = tmp_path / "f"
    path.write_text(text)
    offsets = data._text.line_offsets(path)
    raw = path.read_bytes()
    assert [raw[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)] == raw.splitlines(keepends=True)
