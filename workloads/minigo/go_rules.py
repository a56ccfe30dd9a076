"""Go rules for MiniGo's positions: captures, simple ko, suicide illegal, Tromp-Taylor area
scoring. NumPy only; used by data.py for self-play and for replaying SGF games.

Stones: +1 black, -1 white, 0 empty. Moves are (row, col) tuples, or None for a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BLACK, WHITE, EMPTY = 1, -1, 0
Move = tuple[int, int] | None


class IllegalMove(Exception):
    """A move the rules forbid (occupied point, ko, suicide)."""


def neighbours(n: int, r: int, c: int) -> list[tuple[int, int]]:
    return [(y, x) for y, x in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)) if 0 <= y < n and 0 <= x < n]


def group(board: np.ndarray, r: int, c: int) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The chain of stones at (r, c) and its liberties (flood fill)."""
    n, colour = board.shape[0], board[r, c]
    stones, liberties, frontier = {(r, c)}, set(), [(r, c)]
    while frontier:
        y, x = frontier.pop()
        for p in neighbours(n, y, x):
            if board[p] == EMPTY:
                liberties.add(p)
            elif board[p] == colour and p not in stones:
                stones.add(p)
                frontier.append(p)
    return stones, liberties


@dataclass
class Position:
    """A board, the player to move, the ko point, and the boards before (newest first)."""

    size: int
    komi: float = 7.5
    board: np.ndarray = field(default=None)  # type: ignore[assignment]
    to_play: int = BLACK
    ko: tuple[int, int] | None = None
    history: list[np.ndarray] = field(default_factory=list)
    passes: int = 0
    moves: int = 0

    def __post_init__(self) -> None:
        if self.board is None:
            self.board = np.zeros((self.size, self.size), dtype=np.int8)

    def _captures(self, board: np.ndarray, r: int, c: int) -> list[tuple[int, int]]:
        """Opponent stones next to (r, c) left without a liberty."""
        dead: set[tuple[int, int]] = set()
        for p in neighbours(self.size, r, c):
            if board[p] == -self.to_play and p not in dead:
                stones, liberties = group(board, *p)
                if not liberties:
                    dead |= stones
        return sorted(dead)

    def is_legal(self, move: Move) -> bool:
        try:
            self._after(move)
        except IllegalMove:
            return False
        return True

    def _after(self, move: Move) -> tuple[np.ndarray, tuple[int, int] | None]:
        """The board after `move` and the new ko point, or IllegalMove."""
        if move is None:
            return self.board, None
        r, c = move
        if not (0 <= r < self.size and 0 <= c < self.size):
            raise IllegalMove(f"{move} is off the {self.size}x{self.size} board")
        if self.board[r, c] != EMPTY:
            raise IllegalMove(f"{move} is occupied")
        if move == self.ko:
            raise IllegalMove(f"{move} retakes a ko")
        board = self.board.copy()
        board[r, c] = self.to_play
        dead = self._captures(board, r, c)
        for p in dead:
            board[p] = EMPTY
        stones, liberties = group(board, r, c)
        if not liberties:
            raise IllegalMove(f"{move} is suicide")
        ko = None
        if len(dead) == 1 and len(stones) == 1 and len(liberties) == 1:
            ko = dead[0]  # a single stone took a single stone and can be retaken at once
        return board, ko

    def play(self, move: Move) -> "Position":
        """The position after `move` by the player to move (IllegalMove if the rules forbid it)."""
        board, ko = self._after(move)
        history = [self.board, *self.history][:7]
        return Position(self.size, self.komi, board, -self.to_play, ko, history,
                        self.passes + 1 if move is None else 0, self.moves + 1)

    def is_eye(self, r: int, c: int) -> bool:
        """An empty point whose neighbours are all the player to move's stones (a fill-in would be silly)."""
        return self.board[r, c] == EMPTY and all(self.board[p] == self.to_play for p in neighbours(self.size, r, c))

    def score(self) -> float:
        """Tromp-Taylor area score, black minus white minus komi."""
        board = self.board.copy()
        for r, c in zip(*np.nonzero(board == EMPTY)):
            if board[r, c] != EMPTY:
                continue
            region, borders, frontier = {(r, c)}, set(), [(r, c)]
            while frontier:
                y, x = frontier.pop()
                for p in neighbours(self.size, y, x):
                    if board[p] == EMPTY and p not in region:
                        region.add(p)
                        frontier.append(p)
                    elif board[p] != EMPTY:
                        borders.add(int(board[p]))
            owner = borders.pop() if len(borders) == 1 else 2  # 2: neutral (dame), counts for nobody
            for p in region:
                board[p] = owner
        return float(np.sum(board == BLACK) - np.sum(board == WHITE)) - self.komi
