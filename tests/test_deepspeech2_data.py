"""Deep Speech 2 data pipeline: spectrogram front end, synthetic batches, the LibriSpeech reader."""

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tbdkit.spec import catalog

WORKLOAD = Path(__file__).parents[1] / "workloads" / "deepspeech2"


def _load_data():
    catalog.workloads_on_path()  # the workloads' shared package, as the catalog's loader has it
    spec = importlib.util.spec_from_file_location("ds2_data_under_test", WORKLOAD / "data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


data = _load_data()
TOML = tomllib.loads((WORKLOAD / "workload.toml").read_text())
HP = {**TOML["hparams"], **TOML["preset"]["smoke"]}
PAPER = {**TOML["hparams"], **TOML["preset"]["paper"]}

SENTENCES = ["HELLO WORLD", "THE QUICK BROWN FOX JUMPS", "IT'S A SMALL TEST"]


# ------------------------------------------------------------------------------------------
# Front end and text


def test_alphabet_comes_from_hparams():
    assert data.ALPHABET == TOML["hparams"]["alphabet"] == data.alphabet(HP)
    assert len(data.ALPHABET) == 29 and data.ALPHABET[0] == "_"


def test_frames_for():
    assert data.frames_for(1.0, HP) == 99
    assert data.frames_for(2.0, HP) == 199
    assert data.frames_for(0.001, HP) == 1


@pytest.mark.parametrize("freq, bin_", [(1000.0, 20), (2500.0, 50), (4000.0, 80)])
def test_spectrogram_of_a_sine(freq, bin_):
    t = np.arange(16000) / 16000
    spec = data.spectrogram(0.5 * np.sin(2 * np.pi * freq * t), HP)
    assert spec.dtype == np.float32 and spec.shape == (161, 99)
    assert int(np.argmax(spec.mean(axis=1))) == bin_
    assert np.all(np.argmax(spec, axis=0) == bin_)
    assert abs(float(spec.mean())) < 1e-4
    assert abs(float(spec.std()) - 1.0) < 1e-3


def test_encode_text_lowercases_and_drops_unknown_characters():
    labels = data.encode_text("It's a Test, 42_!", HP)
    assert labels.dtype == np.int32
    assert data.decode_labels(labels, HP) == "it's a test "
    assert labels.min() >= 1
    assert list(data.encode_text("ab", HP)) == [3, 4]


# ------------------------------------------------------------------------------------------
# Synthetic batches


def _take(it, n):
    return [next(it) for _ in range(n)]


def test_synthetic_batches_are_deterministic_per_seed():
    a = _take(data.synthetic_batches(HP, 4, seed=7), 3)
    b = _take(data.synthetic_batches(HP, 4, seed=7), 3)
    c = _take(data.synthetic_batches(HP, 4, seed=8), 3)
    for x, y in zip(a, b):
        for field in ("features", "feature_lengths", "labels", "label_lengths", "durations_s"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert not np.array_equal(a[0].durations_s, c[0].durations_s)
    assert not all(x.features.shape == y.features.shape and np.array_equal(x.features, y.features)
                   for x, y in zip(a, c))


@pytest.mark.parametrize("hp, batch", [(HP, 8), (PAPER, 4)], ids=["smoke", "paper"])
def test_synthetic_batch_shapes_and_contents(hp, batch):
    for b in _take(data.batches("synthetic", hp, batch, seed=1), 3):
        n, t = b.samples, int(b.feature_lengths.max())
        assert n == batch and b.features.shape == (n, 1, 161, t)
        assert b.features.dtype == np.float32 and b.labels.dtype == np.int32
        assert b.feature_lengths.dtype == np.int32 and b.label_lengths.dtype == np.int32
        assert b.durations_s.dtype == np.float64 and b.durations_s.shape == (n,)
        assert np.all(b.durations_s >= hp["duration_min_s"]) and np.all(b.durations_s <= hp["duration_max_s"])
        assert b.work == pytest.approx(float(b.durations_s.sum()))
        assert b.labels.size == b.label_lengths.sum()
        assert b.labels.min() >= 1 and b.labels.max() <= 28
        for i in range(n):
            frames = int(b.feature_lengths[i])
            assert frames == data.frames_for(float(b.durations_s[i]), hp)
            assert np.all(b.features[i, 0, :, frames:] == 0)
            real = b.features[i, 0, :, :frames]
            assert abs(float(real.mean())) < 1e-3 and abs(float(real.std()) - 1.0) < 1e-3
            # ~chars_per_second characters, capped at half the conv output frames
            want = max(1, round(float(b.durations_s[i]) * hp["chars_per_second"]))
            cap = frames // (hp["conv1_stride"][1] * hp["conv2_stride"][1]) // 2
            assert b.label_lengths[i] == max(1, min(want, cap))
            assert b.label_lengths[i] <= max(1, cap)


def test_paper_durations_follow_librispeech():
    d = data.sample_durations(np.random.default_rng(0), 2000, PAPER)
    assert d.min() >= 2.0 and d.max() <= 35.0
    typical = np.mean((d >= 10.0) & (d <= 16.0))
    assert typical >= 0.6
    assert np.sum(d < 10.0) > 20 and np.sum(d > 16.0) > 20
    assert 11.0 < d.mean() < 15.0


def test_check_source_synthetic():
    text = data.check_source("synthetic", HP)
    assert "synthetic" in text and "161" in text


# ------------------------------------------------------------------------------------------
# LibriSpeech reader on a tiny spoken corpus


def _speak(text: str, wav: Path) -> tuple[np.ndarray, int]:
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.fail("espeak-ng is not installed: install it (apt-get install espeak-ng) to build the test corpus")
    subprocess.run([exe, "-w", str(wav), text.lower()], check=True, capture_output=True)
    audio, rate = sf.read(str(wav), dtype="float64", always_2d=True)
    return audio.mean(axis=1), rate


def _resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    n = int(round(audio.size * target / rate))
    return np.interp(np.arange(n) * rate / target, np.arange(audio.size), audio)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("ls")
    root = base / "LibriSpeech" / "train-clean-100"
    chapter = root / "19" / "198"
    chapter.mkdir(parents=True)
    lines = []
    for i, text in enumerate(SENTENCES):
        audio, rate = _speak(text, base / f"{i}.wav")
        uid = f"19-198-{i:04d}"
        sf.write(str(chapter / f"{uid}.flac"), _resample(audio, rate, 16000), 16000, format="FLAC")
        lines.append(f"{uid} {text}")
    (chapter / "19-198.trans.txt").write_text("\n".join(lines) + "\n")
    return root


def test_find_utterances(corpus):
    utts = data.find_utterances(corpus)
    assert [u.text for u in utts] == SENTENCES
    assert [u.path.name for u in utts] == [f"19-198-{i:04d}.flac" for i in range(3)]
    for u in utts:
        assert u.duration_s == pytest.approx(sf.info(str(u.path)).duration)
        assert 0.5 < u.duration_s < 5.0
    # found from any depth above the speaker folders
    assert [u.path for u in data.find_utterances(corpus.parents[1])] == [u.path for u in utts]


def test_librispeech_batches(corpus):
    utts = {u.text.lower(): u for u in data.find_utterances(corpus)}
    got = []
    for b in _take(data.batches(str(corpus), HP, 2, seed=3), 3):
        t = int(b.feature_lengths.max())
        assert b.samples == 2 and b.features.shape == (2, 1, 161, t) and b.features.dtype == np.float32
        texts = [data.decode_labels(x, HP) for x in np.split(b.labels, np.cumsum(b.label_lengths)[:-1])]
        for i, text in enumerate(texts):
            u = utts[text]
            frames = int(b.feature_lengths[i])
            assert b.durations_s[i] == pytest.approx(u.duration_s)
            assert frames == data.frames_for(u.duration_s, HP)
            audio, _ = sf.read(str(u.path), dtype="float32")
            np.testing.assert_allclose(b.features[i, 0, :, :frames], data.spectrogram(audio, HP), atol=1e-6)
            assert np.all(b.features[i, 0, :, frames:] == 0)
        assert b.labels.min() >= 1
        assert b.work == pytest.approx(sum(utts[x].duration_s for x in texts))
        got += texts
    # two full epochs in six samples: every utterance exactly twice
    assert sorted(got) == sorted(2 * list(utts))
    # deterministic per seed
    again = next(data.librispeech_batches(corpus, HP, 2, seed=3))
    first = next(data.librispeech_batches(corpus, HP, 2, seed=3))
    np.testing.assert_array_equal(again.features, first.features)


def test_batch_larger_than_corpus_wraps_around(corpus):
    b = next(data.librispeech_batches(corpus, HP, 5, seed=0))
    assert b.samples == 5 and b.label_lengths.shape == (5,)


def test_check_source_describes_the_corpus(corpus):
    total = sum(u.duration_s for u in data.find_utterances(corpus))
    text = data.check_source(str(corpus), HP)
    assert text == f"LibriSpeech at {corpus}: 3 utterances, {total:.1f} s of audio; all 3 files decoded"


def test_transcript_line_without_flac_is_skipped(corpus, tmp_path):
    root = tmp_path / "train"
    shutil.copytree(corpus, root)
    trans = root / "19" / "198" / "19-198.trans.txt"
    trans.write_text(trans.read_text() + "19-198-0099 A MISSING FILE\n")
    assert len(data.find_utterances(root)) == 3
    assert "skipped 1" in data.check_source(str(root), HP)


def test_missing_path_is_a_data_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(data.DataError, match="does not exist") as e:
        data.check_source(str(missing), HP)
    assert str(missing) in str(e.value) and "train-clean-100" in str(e.value)
    with pytest.raises(data.DataError):
        next(data.batches(str(missing), HP, 2, seed=0))


def test_empty_folder_is_a_data_error(tmp_path):
    with pytest.raises(data.DataError, match="holds no LibriSpeech utterances"):
        data.find_utterances(tmp_path)
    with pytest.raises(data.DataError, match="holds no LibriSpeech utterances"):
        data.check_source(str(tmp_path), HP)


def test_wrong_sample_rate_is_a_data_error(tmp_path):
    chapter = tmp_path / "19" / "198"
    chapter.mkdir(parents=True)
    audio, rate = _speak("HELLO", tmp_path / "hello.wav")
    assert rate == 22050
    sf.write(str(chapter / "19-198-0000.flac"), audio, rate, format="FLAC")
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n")
    assert len(data.find_utterances(tmp_path)) == 1
    for call in (lambda: data.check_source(str(tmp_path), HP),
                 lambda: next(data.librispeech_batches(tmp_path, HP, 1, seed=0))):
        with pytest.raises(data.DataError, match="22050 Hz") as e:
            call()
        assert "19-198-0000.flac" in str(e.value) and "16000 Hz" in str(e.value)


# ------------------------------------------------------------------------------------------
# Damaged audio and transcripts the alphabet cannot spell


def _tone_corpus(root: Path, texts: list[str]) -> Path:
    """A LibriSpeech-shaped chapter of 1 s tones (no speech synthesis needed), one per transcript."""
    chapter = root / "19" / "198"
    chapter.mkdir(parents=True)
    lines = []
    for i, text in enumerate(texts):
        uid = f"19-198-{i:04d}"
        tone = 0.3 * np.sin(2 * np.pi * (200 + 50 * i) * np.arange(16000) / 16000)
        sf.write(str(chapter / f"{uid}.flac"), tone, 16000, format="FLAC")
        lines.append(f"{uid} {text}")
    (chapter / "19-198.trans.txt").write_text("\n".join(lines) + "\n")
    return chapter


def _header_only_flac(intact: Path, out: Path) -> None:
    """A FLAC stream with its metadata and no audio frames, total samples 0 ("unknown"), as an
    encoder killed before its first frame leaves it."""
    b = bytearray(intact.read_bytes())
    assert b[:4] == b"fLaC"
    p = 4
    while True:
        last, kind, size = b[p] & 0x80, b[p] & 0x7F, int.from_bytes(b[p + 1:p + 4], "big")
        if kind == 0:  # STREAMINFO: total samples are the low 36 bits of bytes 13-17
            b[p + 4 + 13] &= 0xF0
            b[p + 4 + 14:p + 4 + 18] = bytes(4)
        p += 4 + size
        if last:
            break
    out.write_bytes(bytes(b[:p]))


def _assert_names_the_fix(e: pytest.ExceptionInfo, flac: Path) -> None:
    msg = str(e.value)
    assert str(flac) in msg and "19-198.trans.txt" in msg and "remove the line 19-198-0001" in msg, msg
    assert "\n" not in msg


def test_a_truncated_flac_is_named_by_both_checks_and_by_the_run(tmp_path):
    chapter = _tone_corpus(tmp_path, ["HELLO", "WORLD", "AGAIN"])
    flac = chapter / "19-198-0001.flac"
    whole = flac.read_bytes()
    flac.write_bytes(whole[: len(whole) // 2])
    assert sf.info(str(flac)).frames == 16000  # the header is intact: only decoding finds the damage
    for full in (True, False):
        with pytest.raises(data.DataError, match="cannot be decoded") as e:
            data.check_source(str(tmp_path), HP, full=full)
        _assert_names_the_fix(e, flac)
    with pytest.raises(data.DataError, match="cannot be decoded") as e:
        _take(data.librispeech_batches(tmp_path, HP, 3, seed=0), 2)
    _assert_names_the_fix(e, flac)


def test_a_flac_without_frames_is_named_not_measured(tmp_path):
    chapter = _tone_corpus(tmp_path, ["HELLO", "WORLD"])
    flac = chapter / "19-198-0001.flac"
    _header_only_flac(chapter / "19-198-0000.flac", flac)
    with pytest.raises(data.DataError, match="no usable length") as e:
        data.check_source(str(tmp_path), HP, full=True)
    _assert_names_the_fix(e, flac)
    with pytest.raises(data.DataError, match="no usable length"):
        next(data.librispeech_batches(tmp_path, HP, 2, seed=0))


def test_the_check_before_a_run_decodes_a_sample_and_prepare_decodes_all(tmp_path):
    _tone_corpus(tmp_path, [f"WORD {i}" for i in range(40)])
    sample = data.check_source(str(tmp_path), HP)
    assert "16 of 40 files decoded" in sample and "data prepare" in sample
    assert "all 40 files decoded" in data.check_source(str(tmp_path), HP, full=True)


def test_characters_outside_the_alphabet_are_counted_and_empty_targets_skipped(tmp_path, caplog):
    _tone_corpus(tmp_path, ["CAFÉ NOIR", "1984", "HELLO WORLD", "ÜBER 42"])
    text = data.check_source(str(tmp_path), HP, full=True)
    assert "3 utterances" in text
    assert "dropped 8 transcript characters outside the alphabet" in text and "'é' x1" in text
    assert "skipped 1 utterances whose transcript keeps no character" in text and "19-198-0001.flac" in text
    with caplog.at_level("WARNING"):
        batch = next(data.librispeech_batches(tmp_path, HP, 6, seed=0))
    assert "CTC cannot train on an empty target" in caplog.text
    assert batch.label_lengths.min() >= 1  # "1984" is never a target
    spelled = {data.decode_labels(x, HP) for x in np.split(batch.labels, np.cumsum(batch.label_lengths)[:-1])}
    assert spelled == {"caf noir", "hello world", "ber "}


def test_transcripts_without_any_alphabet_character_are_a_data_error(tmp_path):
    _tone_corpus(tmp_path, ["1984", "42"])
    with pytest.raises(data.DataError, match="no transcript under"):
        data.check_source(str(tmp_path), HP)
