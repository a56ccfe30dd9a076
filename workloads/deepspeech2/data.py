"""Deep Speech 2 input pipeline: spectrogram front end, synthetic utterances, a LibriSpeech reader.

Framework neutral (NumPy; `soundfile` only when real audio is read). Every size comes from the
hyperparameters `hp` (workload.toml's [hparams] merged with a preset); batches carry padded
log spectrograms shaped (N, 1, F, T) plus CTC targets.
"""

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib  # novermin
except ModuleNotFoundError:  # Python 3.10 (the MXNet image): tomli is the same parser
    import tomli as tomllib  # type: ignore[no-redef]

import numpy as np

from _shared.batches import SYNTHETIC, dispatch
from _shared.checks import chosen, how_checked, regular_files
from _shared.errors import DataError

Hparams = Mapping[str, Any]

MAX_UTTERANCE_S = 3600.0  # longer than any LibriSpeech utterance (35 s): a header beyond it is damaged
log = logging.getLogger("tbdkit.workloads.deepspeech2")


# --------------------------------------------------------------------------------------------
# Alphabet and text


def alphabet(hp: Hparams) -> str:
    """The CTC alphabet from hp["alphabet"]: index 0 is the blank, then the characters."""
    chars = hp["alphabet"]
    if not isinstance(chars, str) or len(chars) < 2 or len(set(chars)) != len(chars):
        raise ValueError(f"hp['alphabet'] must be a string of at least 2 distinct characters, got {chars!r}")
    return chars


def _default_alphabet() -> str:
    with open(Path(__file__).with_name("workload.toml"), "rb") as f:
        return alphabet(tomllib.load(f)["hparams"])


ALPHABET: str = _default_alphabet()


def encode_text(text: str, hp: Hparams) -> np.ndarray:
    """Lowercase `text` and map it to alphabet indices (int32); characters not in it are dropped."""
    index = {c: i for i, c in enumerate(alphabet(hp)) if i > 0}  # index 0 (blank) never a target
    return np.array([index[c] for c in text.lower() if c in index], dtype=np.int32)


def decode_labels(labels: np.ndarray, hp: Hparams) -> str:
    """The inverse of encode_text for one utterance's targets."""
    chars = alphabet(hp)
    return "".join(chars[int(i)] for i in labels)


# --------------------------------------------------------------------------------------------
# Spectrogram front end


def _window_hop(hp: Hparams) -> tuple[int, int]:
    rate = hp["sample_rate_hz"]
    return round(hp["window_ms"] * rate / 1000), round(hp["stride_ms"] * rate / 1000)


def _frames_for_samples(n_samples: int, hp: Hparams) -> int:
    window, hop = _window_hop(hp)
    return 1 + max(0, n_samples - window) // hop


def frames_for(duration_s: float, hp: Hparams) -> int:
    """STFT frames for `duration_s` of audio: 1 + (n_samples - window) // hop (at least 1)."""
    return _frames_for_samples(round(duration_s * hp["sample_rate_hz"]), hp)


def _normalize(log_power: np.ndarray) -> np.ndarray:
    """Per-utterance normalization to mean 0, std 1 (float32)."""
    x = log_power.astype(np.float64)
    x = (x - x.mean()) / (x.std() + 1e-8)
    return x.astype(np.float32)


def spectrogram(audio: np.ndarray, hp: Hparams) -> np.ndarray:
    """Normalized log(1 + |STFT|^2) of mono `audio`, float32 shaped (F, T)."""
    window, hop = _window_hop(hp)
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    if x.size < window:
        x = np.pad(x, (0, window - x.size))
    frames = np.lib.stride_tricks.sliding_window_view(x, window)[::hop]  # (T, window)
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)   # periodic Hann
    power = np.abs(np.fft.rfft(frames * hann, n=window, axis=1)) ** 2      # (T, window//2 + 1)
    if power.shape[1] != hp["frequency_bins"]:
        raise ValueError(
            f"a {window}-sample window gives {power.shape[1]} bins, but hp['frequency_bins'] is "
            f"{hp['frequency_bins']}: make window_ms, sample_rate_hz and frequency_bins agree"
        )
    return _normalize(np.log1p(power).T)


# --------------------------------------------------------------------------------------------
# Batches


@dataclass(frozen=True, eq=False)
class Batch:
    """Padded features (N, 1, F, T) float32 and concatenated CTC targets."""

    features: np.ndarray
    feature_lengths: np.ndarray
    labels: np.ndarray
    label_lengths: np.ndarray
    durations_s: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def work(self) -> float:
        """Total audio seconds in the batch (the throughput unit)."""
        return float(self.durations_s.sum())

    @property
    def padded_work(self) -> float:
        """Audio seconds the step computes: every utterance padded to the longest (warm-up's cost unit)."""
        return self.work * self.features.shape[0] * self.features.shape[3] / max(int(self.feature_lengths.sum()), 1)


def collate(features: Sequence[np.ndarray], labels: Sequence[np.ndarray], durations_s: Sequence[float]) -> Batch:
    """Zero-pad (F, T_i) spectrograms to the longest and concatenate the targets."""
    lengths = np.array([f.shape[1] for f in features], dtype=np.int32)
    n, bins, t_max = len(features), features[0].shape[0], int(lengths.max())
    padded = np.zeros((n, 1, bins, t_max), dtype=np.float32)
    for i, f in enumerate(features):
        padded[i, 0, :, : f.shape[1]] = f
    return Batch(
        features=padded,
        feature_lengths=lengths,
        labels=np.concatenate([np.asarray(x, dtype=np.int32) for x in labels]),
        label_lengths=np.array([len(x) for x in labels], dtype=np.int32),
        durations_s=np.asarray(durations_s, dtype=np.float64),
    )


# --------------------------------------------------------------------------------------------
# Synthetic utterances


def sample_durations(rng: np.random.Generator, n: int, hp: Hparams) -> np.ndarray:
    """Utterance durations (s): a typical share uniform in the typical range, the rest triangular."""
    lo, hi = hp["duration_min_s"], hp["duration_max_s"]
    t_lo, t_hi = hp["duration_typical_low_s"], hp["duration_typical_high_s"]
    typical = rng.random(n) < hp["duration_typical_fraction"]
    uniform = rng.uniform(t_lo, t_hi, n)
    tri = rng.triangular(lo, min(max((t_lo + t_hi) / 2, lo), hi), hi, n)
    return np.clip(np.where(typical, uniform, tri), lo, hi)


def _time_strides(hp: Hparams) -> int:
    return int(hp["conv1_stride"][1]) * int(hp["conv2_stride"][1])


def _synthetic_label_length(duration_s: float, frames: int, hp: Hparams) -> int:
    """~chars_per_second characters, capped at half the conv output frames (room for repeats)."""
    want = max(1, round(duration_s * hp["chars_per_second"]))
    return max(1, min(want, (frames // _time_strides(hp)) // 2))


def _synthetic_log_power(rng: np.random.Generator, frames: int, bins: int) -> np.ndarray:
    """Speech-like log power (bins, frames): spectral envelope x syllable envelope x chi^2 noise."""
    f = np.linspace(0.0, 1.0, bins)
    log_env = -rng.uniform(2.0, 6.0) * f  # energy falls with frequency
    for _ in range(3):                    # formant-like bumps
        centre, width = rng.uniform(0.02, 0.5), rng.uniform(0.02, 0.08)
        log_env += rng.uniform(1.0, 3.0) * np.exp(-0.5 * ((f - centre) / width) ** 2)
    knots = np.arange(0, frames + 20, 20)  # level changes every ~200 ms
    log_level = np.interp(np.arange(frames), knots, rng.normal(0.0, 1.5, knots.size))
    power = np.exp(log_env[:, None] + log_level[None, :] + rng.uniform(-1.0, 2.0))
    return np.log1p(power * rng.exponential(1.0, (bins, frames)))


def synthetic_batches(hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches of synthetic utterances, deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    n_chars, bins = len(alphabet(hp)), int(hp["frequency_bins"])
    while True:
        durations = sample_durations(rng, batch_size, hp)
        feats, labels = [], []
        for d in durations:
            frames = frames_for(float(d), hp)
            feats.append(_normalize(_synthetic_log_power(rng, frames, bins)))
            labels.append(rng.integers(1, n_chars, _synthetic_label_length(float(d), frames, hp), dtype=np.int32))
        yield collate(feats, labels, durations)


# --------------------------------------------------------------------------------------------
# LibriSpeech


@dataclass(frozen=True)
class Utterance:
    """One LibriSpeech utterance: its FLAC file, transcript, duration, and the *.trans.txt it is listed in."""

    path: Path
    text: str
    duration_s: float
    listed_in: Path | None = None


def _exclude(utt: Utterance) -> str:
    """How to leave one damaged utterance out of the corpus."""
    listing = utt.listed_in if utt.listed_in is not None else utt.path.parent
    return (f"remove the line {utt.path.stem} from {listing} (or replace the file with an intact copy "
            f"from the LibriSpeech archive) and check again")


@dataclass(frozen=True)
class _Scan:
    utterances: list[Utterance]
    sample_rates: list[int]
    skipped: int


def _soundfile() -> Any:
    try:
        import soundfile
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise DataError(f"reading LibriSpeech needs the soundfile package ({e}): pip install soundfile") from e
    return soundfile


def _scan(root: Path) -> _Scan:
    """Walk `root` for LibriSpeech transcripts and their FLAC files."""
    if not root.exists():
        raise DataError(
            f"data path {root} does not exist: pass the folder that holds LibriSpeech's speaker folders, "
            f"e.g. .../LibriSpeech/train-clean-100"
        )
    if not root.is_dir():
        raise DataError(
            f"data path {root} is not a folder: pass the folder that holds LibriSpeech's speaker folders, "
            f"e.g. .../LibriSpeech/train-clean-100"
        )
    transcripts = regular_files(root, "*.trans.txt")  # never a FIFO: its read would wait forever
    sf = _soundfile()
    utts: list[Utterance] = []
    rates: list[int] = []
    skipped = 0
    for trans in transcripts:
        for line in trans.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.strip().split(maxsplit=1)
            if not parts:
                continue
            flac = trans.parent / f"{parts[0]}.flac"
            if len(parts) < 2 or not flac.is_file():
                skipped += 1
                continue
            utt = Utterance(path=flac, text=parts[1], duration_s=0.0, listed_in=trans)
            try:
                info = sf.info(str(flac))
            except RuntimeError as e:
                raise DataError(f"{flac} cannot be read ({e}): {_exclude(utt)}") from e
            duration = float(info.frames) / info.samplerate if info.samplerate > 0 else 0.0
            if info.frames <= 0 or not 0 < duration <= MAX_UTTERANCE_S:
                # libsndfile gives an unknown length (a stream with no frames) as 2**63 - 1 frames
                raise DataError(f"{flac} has no usable length in its header ({info.frames} frames at "
                                f"{info.samplerate} Hz): {_exclude(utt)}")
            utts.append(Utterance(path=flac, text=parts[1], duration_s=duration, listed_in=trans))
            rates.append(int(info.samplerate))
    if not utts:
        raise DataError(
            f"data path {root} holds no LibriSpeech utterances (no *.trans.txt with matching .flac files): "
            f"pass a LibriSpeech split folder such as .../LibriSpeech/train-clean-100"
        )
    order = sorted(range(len(utts)), key=lambda i: str(utts[i].path))
    return _Scan([utts[i] for i in order], [rates[i] for i in order], skipped)


def find_utterances(root: Path) -> list[Utterance]:
    """All utterances below `root` (LibriSpeech layout), sorted by path; lines without audio are skipped."""
    return _scan(Path(root)).utterances


def _rate_error(path: Path, rate: int, hp: Hparams) -> DataError:
    return DataError(
        f"{path} is sampled at {rate} Hz but the model expects {hp['sample_rate_hz']} Hz: "
        f"resample the corpus to {hp['sample_rate_hz']} Hz (e.g. sox in.flac -r {hp['sample_rate_hz']} out.flac)"
    )


def _read_audio(utt: Utterance, hp: Hparams) -> np.ndarray:
    """Mono float32 samples of an utterance's FLAC file, decoded whole, at hp["sample_rate_hz"];
    a DataError naming the file when it cannot be decoded."""
    try:
        audio, rate = _soundfile().read(str(utt.path), dtype="float32", always_2d=True)
    except RuntimeError as e:  # soundfile.LibsndfileError: a truncated or damaged stream
        raise DataError(f"{utt.path} cannot be decoded ({e}): {_exclude(utt)}") from e
    if rate != hp["sample_rate_hz"]:
        raise _rate_error(utt.path, rate, hp)
    if audio.shape[0] == 0:
        raise DataError(f"{utt.path} decodes to no audio: {_exclude(utt)}")
    return audio.mean(axis=1)


@dataclass(frozen=True)
class Transcripts:
    """What encoding the transcripts to the alphabet loses: the characters dropped (with counts)
    and the utterances left with an empty target, which CTC cannot train on."""

    dropped: Counter[str]
    empty: list[Utterance]

    def describe(self) -> str:
        parts = []
        if self.dropped:
            shown = ", ".join(f"{c!r} x{n}" for c, n in self.dropped.most_common(5))
            parts.append(f"dropped {sum(self.dropped.values())} transcript characters outside the alphabet ({shown})")
        if self.empty:
            parts.append(f"skipped {len(self.empty)} utterances whose transcript keeps no character of the "
                         f"alphabet (CTC cannot train on an empty target; first: {self.empty[0].path})")
        return "; ".join(parts)


def transcripts(utts: Sequence[Utterance], hp: Hparams) -> Transcripts:
    """Count the characters encode_text drops and the utterances it leaves without a target."""
    chars = set(alphabet(hp)[1:])
    dropped: Counter[str] = Counter()
    empty = []
    for u in utts:
        lowered = u.text.lower()  # as encode_text reads it (lowering may change the length)
        lost = [c for c in lowered if c not in chars]
        dropped.update(lost)
        if len(lost) == len(lowered):
            empty.append(u)
    return Transcripts(dropped, empty)


def trainable(utts: Sequence[Utterance], hp: Hparams, root: Path) -> tuple[list[Utterance], Transcripts]:
    """The utterances with a non-empty target and what encoding the transcripts lost; a DataError
    when no utterance is left."""
    found = transcripts(utts, hp)
    if len(found.empty) == len(utts):
        raise DataError(f"no transcript under {root} has a character of the alphabet {alphabet(hp)[1:]!r}: "
                        f"pass LibriSpeech transcripts (upper-case English letters, apostrophes and spaces)")
    empty = {id(u) for u in found.empty}
    return [u for u in utts if id(u) not in empty], found


def _epoch_indices(n: int, rng: np.random.Generator) -> Iterator[int]:
    while True:
        yield from (int(i) for i in rng.permutation(n))


def librispeech_batches(root: Path, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Endless batches over the utterances below `root`, reshuffled every epoch by `seed`."""
    utts, lost = trainable(find_utterances(Path(root)), hp, Path(root))
    if lost.dropped or lost.empty:
        log.warning("LibriSpeech at %s: %s", root, lost.describe())
    indices = _epoch_indices(len(utts), np.random.default_rng(seed))
    while True:
        feats, labels, durations = [], [], []
        for _ in range(batch_size):
            u = utts[next(indices)]
            audio = _read_audio(u, hp)
            feats.append(spectrogram(audio, hp))
            labels.append(encode_text(u.text, hp))
            durations.append(audio.size / hp["sample_rate_hz"])
        yield collate(feats, labels, durations)


# --------------------------------------------------------------------------------------------
# Entry points


def reference_batch(hp: Hparams) -> Batch:
    """The one sample FLOPs per sample are quoted for: an utterance at the middle of the typical
    duration range (2 s for `smoke`, 13 s for `paper`), silent, with a synthetic-length transcript."""
    duration = (hp["duration_typical_low_s"] + hp["duration_typical_high_s"]) / 2
    frames = frames_for(duration, hp)
    labels = np.ones(_synthetic_label_length(duration, frames, hp), dtype=np.int32)
    return collate([np.zeros((int(hp["frequency_bins"]), frames), dtype=np.float32)], [labels], [duration])


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches from "synthetic" or from a LibriSpeech folder path."""
    return dispatch(source, hp, batch_size, seed, synthetic_batches, librispeech_batches)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; decode every
    file when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    if source == SYNTHETIC:
        return (
            f"synthetic LibriSpeech-like utterances: {hp['duration_min_s']:g}-{hp['duration_max_s']:g} s "
            f"({hp['duration_typical_fraction']:.0%} in {hp['duration_typical_low_s']:g}-"
            f"{hp['duration_typical_high_s']:g} s), {hp['frequency_bins']}-bin normalized log spectrograms, "
            f"~{hp['chars_per_second']:g} characters/s"
        )
    root = Path(source)
    scan = _scan(root)
    for utt, rate in zip(scan.utterances, scan.sample_rates):
        if rate != hp["sample_rate_hz"]:
            raise _rate_error(utt.path, rate, hp)
    utts, lost = trainable(scan.utterances, hp, root)
    decoded = chosen(utts, full)
    for utt in decoded:
        frames = _read_audio(utt, hp).size
        expected = round(utt.duration_s * hp["sample_rate_hz"])
        if frames != expected:
            raise DataError(f"{utt.path} decodes to {frames} samples but its header says {expected}: {_exclude(utt)}")
    total = sum(u.duration_s for u in utts)
    notes = [how_checked(len(decoded), len(utts), "files")]
    if scan.skipped:
        notes.append(f"skipped {scan.skipped} transcript lines without a .flac file")
    if lost.dropped or lost.empty:
        notes.append(lost.describe())
    return f"LibriSpeech at {root}: {len(utts)} utterances, {total:.1f} s of audio; " + "; ".join(notes)
