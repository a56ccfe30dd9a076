"""MiniGo's positions: self-play games under real Go rules (go_rules.py), or the games of SGF files,
turned into training examples: MiniGo's "agz" input planes, the move played as the policy
target, the game's result as the value target, under a random one of the board's 8 symmetries.

Framework neutral (NumPy only). Self-play here picks uniformly among legal moves that do not
fill the player's own eye (the network-free playout policy): positions and targets have the real
shapes and follow the rules, but no MCTS is run, so they are not MiniGo-strength games.
"""

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from _shared.batches import SYNTHETIC
from _shared.checks import chosen, exclude_hint, how_checked, regular_files
from _shared.errors import DataError
from _shared.sibling import load

go = load("minigo", "go_rules")  # go_rules.py: the rules of Go, in NumPy

Hparams = Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class Batch:
    """Positions (N, planes, size, size) float32, policy targets (N,) in [0, size^2] (pass last),
    values (N,) in {-1, +1} from the player to move's side."""

    features: np.ndarray
    moves: np.ndarray
    values: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def work(self) -> float:
        """Positions in the batch (the throughput unit)."""
        return float(self.samples)


# --------------------------------------------------------------------------------------------
# Features and examples


def features(position: go.Position, history: int) -> np.ndarray:
    """MiniGo's "agz" planes: the player to move's and the opponent's stones, newest first and
    interleaved, over `history` boards, then a plane of ones when black is to move."""
    boards = [position.board, *position.history][:history]
    boards += [np.zeros_like(position.board)] * (history - len(boards))
    planes = []
    for b in boards:
        planes += [b == position.to_play, b == -position.to_play]
    planes.append(np.full(position.board.shape, position.to_play == go.BLACK))
    return np.stack(planes).astype(np.float32)


def move_index(move: go.Move, size: int) -> int:
    return size * size if move is None else move[0] * size + move[1]


@lru_cache(maxsize=4)
def point_maps(size: int) -> np.ndarray:
    """(8, size^2 + 1): where each point (and pass, last) goes under each of the 8 symmetries."""
    maps = np.empty((8, size * size + 1), dtype=np.int64)
    points = np.arange(size * size).reshape(size, size)
    for k in range(8):
        moved = np.rot90(points[:, ::-1] if k >= 4 else points, k % 4)
        maps[k, moved.reshape(-1)] = np.arange(size * size)
        maps[k, -1] = size * size
    return maps


def symmetry(planes: np.ndarray, move: int, k: int) -> tuple[np.ndarray, int]:
    """The k-th (0-7) rotation/reflection of the planes and of the move's point (pass stays pass)."""
    if k >= 4:
        planes = planes[..., ::-1]
    planes = np.rot90(planes, k % 4, axes=(-2, -1))
    return np.ascontiguousarray(planes), int(point_maps(planes.shape[-1])[k, move])


@dataclass(frozen=True)
class Game:
    """A finished game: the positions before each move, the moves, and black's result (+1/-1)."""

    positions: list[go.Position]
    moves: list[go.Move]
    winner: int


def examples(game: Game, hp: Hparams) -> list[tuple[np.ndarray, int, float]]:
    return [(features(p, int(hp["history"])), move_index(m, p.size), float(game.winner * p.to_play))
            for p, m in zip(game.positions, game.moves)]


def collate(chosen: Sequence[tuple[np.ndarray, int, float]], rng: np.random.Generator) -> Batch:
    feats, moves = [], []
    for planes, move, _ in chosen:
        planes, move = symmetry(planes, move, int(rng.integers(8)))
        feats.append(planes)
        moves.append(move)
    return Batch(np.stack(feats), np.array(moves, np.int64), np.array([v for _, _, v in chosen], np.float32))


# --------------------------------------------------------------------------------------------
# Self-play


def random_move(position: go.Position, rng: np.random.Generator) -> tuple[go.Move, go.Position]:
    """A uniformly random legal move that does not fill the player's own eye, or a pass."""
    empties = np.argwhere(position.board == go.EMPTY)
    for i in rng.permutation(len(empties)):
        move = (int(empties[i][0]), int(empties[i][1]))
        if position.is_eye(*move):
            continue
        try:
            return move, position.play(move)
        except go.IllegalMove:
            continue
    return None, position.play(None)


def self_play(hp: Hparams, rng: np.random.Generator) -> Game:
    """One game to two passes or the move cap, scored by Tromp-Taylor with the komi."""
    position = go.Position(int(hp["board_size"]), float(hp["komi"]))
    positions, moves = [], []
    while position.passes < 2 and position.moves < int(hp["max_game_length"]):
        move, after = random_move(position, rng)
        positions.append(position)
        moves.append(move)
        position = after
    return Game(positions, moves, go.BLACK if position.score() > 0 else go.WHITE)


def position_batches(games: Iterator[Game], hp: Hparams, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
    """Batches drawn at random from a buffer of games' positions, refilled from `games`."""
    buffer: list[tuple[np.ndarray, int, float]] = []
    while True:
        while len(buffer) < max(batch_size, int(hp["buffer_positions"])):
            buffer += examples(next(games), hp)
        picked = set(rng.choice(len(buffer), batch_size, replace=False).tolist())
        yield collate([buffer[i] for i in sorted(picked)], rng)
        buffer = [x for i, x in enumerate(buffer) if i not in picked]


# --------------------------------------------------------------------------------------------
# SGF


SGF_TOKEN = re.compile(r"\(|\)|;|([A-Za-z]+)((?:\s*\[(?:[^\]\\]|\\.)*\])+)")
SGF_VALUE = re.compile(r"\[((?:[^\]\\]|\\.)*)\]")


def sgf_nodes(text: str) -> list[dict[str, list[str]]]:
    """The main line's nodes of an SGF game: the first variation at every branch."""
    main: list[dict[str, list[str]]] = []
    closed: list[bool] = []   # per open "(": has one of its child variations been read already
    skip = 0                  # depth of the variation being skipped, 0 when reading
    for m in SGF_TOKEN.finditer(text):
        token = m.group(0)
        if token == "(":
            if not skip and closed and closed[-1]:
                skip = len(closed) + 1
            closed.append(False)
        elif token == ")":
            if not closed:
                raise ValueError(f"a ')' at character {m.start()} closes no '('")
            if skip == len(closed):
                skip = 0
            closed.pop()
            if closed and not skip:
                closed[-1] = True
        elif skip:
            continue
        elif token == ";":
            main.append({})
        elif main:
            main[-1].setdefault(m.group(1).upper(), []).extend(SGF_VALUE.findall(m.group(2)))
    if closed:
        raise ValueError(f"{len(closed)} '(' never closed: the file is truncated")
    return main


def _sgf_point(value: str, size: int) -> go.Move:
    if value == "" or (value == "tt" and size <= 19):
        return None
    if len(value) != 2:
        raise ValueError(f"bad point [{value}]")
    return ord(value[1]) - ord("a"), ord(value[0]) - ord("a")


def _malformed(path: Path, e: Exception) -> DataError:
    return DataError(f"{path} is not a well-formed SGF game ({e}): fix it or {exclude_hint(path, path.parent)}")


def read_sgf(path: Path, hp: Hparams) -> Game | None:
    """Replay one SGF game under the rules; None when it has no decisive result (RE)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        nodes = sgf_nodes(text)
        if not nodes:
            raise DataError(f"{path} holds no SGF game: pass a folder of .sgf game records")
        root = nodes[0]
        size = int(root.get("SZ", ["19"])[0].split(":")[0])
        komi = float(root.get("KM", [hp["komi"]])[0] or hp["komi"])
    except ValueError as e:
        raise _malformed(path, e) from e
    if size != int(hp["board_size"]):
        raise DataError(f"{path} is a {size}x{size} game but the model plays {hp['board_size']}x{hp['board_size']}: "
                        f"pass games of that size (or the other preset)")
    result = root.get("RE", [""])[0].strip().upper()
    if not result.startswith(("B+", "W+")):
        return None
    position = go.Position(size, komi)
    for colour, key in ((go.BLACK, "AB"), (go.WHITE, "AW")):
        for value in root.get(key, []):
            try:
                point = _sgf_point(value, size)
                if point is not None and not (0 <= point[0] < size and 0 <= point[1] < size):
                    raise ValueError(f"setup stone {key}[{value}] is off the {size}x{size} board")
            except ValueError as e:
                raise _malformed(path, e) from e
            if point is not None:
                position.board[point] = colour
    positions, moves = [], []
    for number, node in enumerate(nodes[1:], start=1):
        for colour, key in ((go.BLACK, "B"), (go.WHITE, "W")):
            if key not in node:
                continue
            try:
                move = _sgf_point(node[key][0], size)
                position.to_play = colour
                after = position.play(move)
            except (ValueError, go.IllegalMove) as e:
                raise DataError(f"{path}: move {number} ({key}[{node[key][0]}]) cannot be played ({e}): "
                                f"fix or remove the game record") from e
            positions.append(position)
            moves.append(move)
            position = after
    return Game(positions, moves, go.BLACK if result.startswith("B+") else go.WHITE) if moves else None


def sgf_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise DataError(f"data path {root} is not an existing folder: pass a folder of .sgf game records")
    files = regular_files(root, "*.sgf")
    if not files:
        raise DataError(f"{root} holds no .sgf files: pass a folder of .sgf game records")
    return files


def sgf_games(root: Path, hp: Hparams, rng: np.random.Generator) -> Iterator[Game]:
    files = sgf_files(root)
    while True:
        found = False
        for i in rng.permutation(len(files)):
            game = read_sgf(files[int(i)], hp)
            if game is not None:
                found = True
                yield game
        if not found:
            raise DataError(f"no game under {root} has a decisive result (RE[B+...] or RE[W+...]): "
                            f"pass finished games")


# --------------------------------------------------------------------------------------------
# Entry points


def batches(source: str, hp: Hparams, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches of positions from self-play ("synthetic") or from a folder of SGF games."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    rng = np.random.default_rng(seed)
    games = iter(lambda: self_play(hp, rng), None) if source == SYNTHETIC else sgf_games(Path(source), hp, rng)
    return position_batches(games, hp, batch_size, rng)


def reference_batch(hp: Hparams) -> Batch:
    """One position, the empty board with black to move: the sample FLOPs per sample are quoted for."""
    position = go.Position(int(hp["board_size"]), float(hp["komi"]))
    return Batch(features(position, int(hp["history"]))[None], np.array([0], np.int64), np.ones(1, np.float32))


def probe_batch(hp: Hparams) -> Batch:
    """Two positions of one self-play game (seed 0), the 11th and 12th: `tbdkit describe --save`
    compares the frameworks' outputs on them."""
    rng = np.random.default_rng(0)
    return collate(examples(self_play(hp, rng), hp)[10:12], rng)


def check_source(source: str, hp: Hparams, full: bool = False) -> str:
    """Validate the data source up front (DataError) and describe it in one line; replay every
    game when `full` (`tbdkit data prepare`), else an even sample (the check before a run)."""
    n = hp["board_size"]
    if source == SYNTHETIC:
        return (f"self-play {n}x{n} games under Go rules (captures, ko, no suicide; random legal moves, no MCTS), "
                f"Tromp-Taylor scoring with komi {hp['komi']}")
    files = sgf_files(Path(source))
    replayed = chosen(files, full)
    decisive = sum(read_sgf(path, hp) is not None for path in replayed)
    if full and not decisive:
        raise DataError(f"no game under {source} has a decisive result (RE[B+...] or RE[W+...]): pass finished games")
    undecided = f", {len(replayed) - decisive} without a decisive result (skipped)" if decisive < len(replayed) else ""
    checked = how_checked(len(replayed), len(files), "games", ("replayed", "replays"))
    return f"SGF games at {source}: {len(files)} files of {n}x{n} Go; {checked}{undecided}"
