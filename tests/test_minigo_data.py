"""MiniGo data: the Go rules (captures, ko, suicide, scoring), the agz features and symmetries,
self-play positions, and the SGF reader on game records the tests write."""

import numpy as np
import pytest

from model_checks import hparams, load_data

data = load_data("minigo")
go = data.go
HP = hparams("minigo", "smoke")
PAPER = hparams("minigo", "paper")


def board(rows: list[str]) -> "go.Position":
    """A position from rows of 'X' (black), 'O' (white), '.'; black to move."""
    size = len(rows)
    b = np.array([[{"X": 1, "O": -1, ".": 0}[ch] for ch in row] for row in rows], dtype=np.int8)
    return go.Position(size, 7.5, b)


# ------------------------------------------------------------------------------------------
# Rules


def test_capture_of_a_stone_and_of_a_group():
    p = board([".X...", "XO...", ".X...", ".....", "....."])
    after = p.play((1, 2))
    assert after.board[1, 1] == 0 and after.to_play == go.WHITE
    p = board(["OO...", "XX...", ".....", ".....", "....."])
    p.to_play = go.WHITE
    p = p.play((4, 4)).play((0, 2))                          # white elsewhere, black captures two
    assert p.board[0, 0] == 0 and p.board[0, 1] == 0


def test_suicide_is_illegal_unless_it_captures():
    p = board([".O...", "O....", ".....", ".....", "....."])
    with pytest.raises(go.IllegalMove, match="suicide"):
        p.play((0, 0))
    assert not p.is_legal((0, 0)) and p.is_legal((2, 2))
    p = board([".OX..", "OX...", "X....", ".....", "....."])  # black at the corner captures both white stones
    after = p.play((0, 0))
    assert after.board[0, 1] == 0 and after.board[1, 0] == 0


def test_ko_cannot_be_retaken_at_once():
    p = board([".XO..", "X.XO.", ".XO..", ".....", "....."])
    p.to_play = go.WHITE
    p = p.play((1, 1))                                         # white captures the black stone at (1,2)
    assert p.board[1, 2] == 0 and p.ko == (1, 2)
    with pytest.raises(go.IllegalMove, match="ko"):
        p.play((1, 2))
    p = p.play((4, 4)).play((4, 0))                            # a ko threat exchange elsewhere
    assert p.is_legal((1, 2))


def test_occupied_and_off_board_points_are_illegal():
    p = board(["X....", ".....", ".....", ".....", "....."])
    with pytest.raises(go.IllegalMove, match="occupied"):
        p.play((0, 0))
    with pytest.raises(go.IllegalMove, match="off the 5x5 board"):
        p.play((5, 0))


def test_tromp_taylor_score():
    p = board([".X.O.", ".X.O.", ".X.O.", ".X.O.", ".X.O."])
    # black: 5 stones + column 0 (5); white: 5 stones + column 4 (5); column 2 touches both: neutral
    assert p.score() == -7.5
    assert board(["X....", ".....", ".....", ".....", "....."]).score() == 25 - 7.5


def test_two_passes_end_the_game():
    p = go.Position(5).play(None).play(None)
    assert p.passes == 2 and p.moves == 2


# ------------------------------------------------------------------------------------------
# Features and symmetries


def test_agz_features():
    p = go.Position(5).play((0, 0)).play((4, 4))               # black, white; black to move
    f = data.features(p, 8)
    assert f.shape == (17, 5, 5) and f.dtype == np.float32
    assert f[0, 0, 0] == 1 and f[1, 4, 4] == 1                 # now: own (black), opponent (white)
    assert f[2, 0, 0] == 1 and f[3].sum() == 0                 # one move ago: only black's stone
    assert f[4].sum() == 0 and f[5].sum() == 0                 # two moves ago: empty board
    assert np.all(f[16] == 1)                                  # black to move
    assert np.all(data.features(p.play((2, 2)), 8)[16] == 0)


def test_symmetries_move_the_stone_and_the_policy_target_together():
    p = go.Position(9).play((1, 3))
    planes = data.features(p, 8)
    idx = data.move_index((1, 3), 9)
    seen = set()
    for k in range(8):
        out, moved = data.symmetry(planes, idx, k)
        assert out.shape == planes.shape
        assert out[1].reshape(-1)[moved] == 1                   # the opponent's stone sits where the move went
        seen.add(moved)
        assert data.symmetry(planes, 81, k)[1] == 81           # pass stays pass
    assert len(seen) == 8


# ------------------------------------------------------------------------------------------
# Self-play


def test_self_play_games_follow_the_rules():
    game = data.self_play(HP, np.random.default_rng(0))
    assert 10 < len(game.moves) <= HP["max_game_length"] and game.winner in (1, -1)
    replay = go.Position(9)
    for position, move in zip(game.positions, game.moves):
        np.testing.assert_array_equal(position.board, replay.board)
        replay = replay.play(move)                              # every move is legal
    values = [v for _, _, v in data.examples(game, HP)]
    assert values[0] == game.winner and values[1] == -game.winner


@pytest.mark.parametrize("hp", [HP, PAPER], ids=["smoke", "paper"])
def test_synthetic_batches(hp):
    n = hp["board_size"]
    b = next(data.batches("synthetic", {**hp, "buffer_positions": 64}, 16, seed=1))
    assert b.features.shape == (16, 17, n, n) and b.work == 16.0
    assert b.moves.min() >= 0 and b.moves.max() <= n * n and set(np.unique(b.values)) <= {-1.0, 1.0}
    if hp is HP:
        again = next(data.batches("synthetic", {**hp, "buffer_positions": 64}, 16, seed=1))
        np.testing.assert_array_equal(b.features, again.features)
    assert "self-play 9x9" in data.check_source("synthetic", HP)


# ------------------------------------------------------------------------------------------
# SGF

GAME = """(;GM[1]FF[4]SZ[9]KM[7.5]RE[B+R]C[a comment (with ; parens) and \\] escaped]
;B[ba];W[aa];B[ab];W[ee];B[cc]
(;W[tt];B[])(;W[aa]))"""


def test_sgf_game_is_replayed_with_captures(tmp_path):
    (tmp_path / "a").mkdir()
    path = tmp_path / "a" / "game.sgf"
    path.write_text(GAME)
    game = data.read_sgf(path, HP)
    assert game.moves == [(0, 1), (0, 0), (1, 0), (4, 4), (2, 2), None, None]   # first variation; tt and [] pass
    assert game.winner == go.BLACK and game.positions[0].komi == 7.5
    assert game.positions[2].board[0, 0] == go.WHITE and game.positions[3].board[0, 0] == go.EMPTY  # captured
    b = next(data.batches(str(tmp_path), {**HP, "buffer_positions": 8}, 4, seed=0))
    assert b.features.shape == (4, 17, 9, 9)
    assert data.check_source(str(tmp_path), HP) == f"SGF games at {tmp_path}: 1 files of 9x9 Go; all 1 games replayed"


def test_sgf_errors_say_what_to_do(tmp_path):
    with pytest.raises(data.DataError, match="is not an existing folder: pass a folder of .sgf"):
        data.check_source(str(tmp_path / "nope"), HP)
    with pytest.raises(data.DataError, match="holds no .sgf files"):
        data.check_source(str(tmp_path), HP)
    (tmp_path / "big.sgf").write_text("(;SZ[19]RE[W+2.5];B[pd])")
    with pytest.raises(data.DataError, match="is a 19x19 game but the model plays 9x9"):
        next(data.batches(str(tmp_path), HP, 2, 0))
    (tmp_path / "big.sgf").write_text("(;SZ[9]RE[W+2.5];B[ee];W[ee])")
    with pytest.raises(data.DataError, match=r"move 2 \(W\[ee\]\) cannot be played \(.*occupied\): fix or remove"):
        next(data.batches(str(tmp_path), HP, 2, 0))
    (tmp_path / "big.sgf").write_text("(;SZ[9]RE[Void];B[ee];W[cc])")
    assert data.read_sgf(tmp_path / "big.sgf", HP) is None
    with pytest.raises(data.DataError, match="no game under .* has a decisive result"):
        next(data.batches(str(tmp_path), HP, 2, 0))


@pytest.mark.parametrize("text, why", [
    ("(;GM[1]SZ[9]RE[B+R];B[ee];W[cc];B[d", "never closed: the file is truncated"),
    ("(;GM[1]SZ[9]RE[B+R];B[ee]))", "closes no '\\('"),
    ("(;GM[1]SZ[nine]RE[B+R];B[ee])", "invalid literal"),
    ("(;GM[1]SZ[9]KM[six]RE[B+R];B[ee])", "could not convert"),
    ("(;GM[1]SZ[9]AB[zz]RE[B+R];B[ee])", "setup stone AB\\[zz\\] is off the 9x9 board"),
])
def test_a_malformed_game_is_named_by_both_checks(tmp_path, text, why):
    for i in range(3):
        (tmp_path / f"g{i}.sgf").write_text("(;GM[1]SZ[9]RE[W+2.5];B[ee];W[cc])")
    bad = tmp_path / "g1.sgf"
    bad.write_text(text)
    for full in (True, False):
        with pytest.raises(data.DataError, match=why) as e:
            data.check_source(str(tmp_path), HP, full=full)
        assert f"{bad} is not a well-formed SGF game" in str(e.value) and "move g1.sgf out of" in str(e.value)
    with pytest.raises(data.DataError, match="is not a well-formed SGF game"):
        next(data.batches(str(tmp_path), {**HP, "buffer_positions": 64}, 2, 0))


def test_the_check_before_a_run_replays_a_sample(tmp_path):
    for i in range(20):
        (tmp_path / f"g{i:02d}.sgf").write_text("(;GM[1]SZ[9]RE[W+2.5];B[ee];W[cc])" if i else "(;SZ[9]RE[?];B[ee])")
    assert data.check_source(str(tmp_path), HP).endswith(
        "16 of 20 games replayed (`tbdkit data prepare` replays them all), 1 without a decisive result (skipped)")
    assert data.check_source(str(tmp_path), HP, full=True).endswith("all 20 games replayed, 1 without a decisive "
                                                                     "result (skipped)")
    for f in tmp_path.iterdir():
        f.write_text("(;SZ[9]RE[Void];B[ee])")
    with pytest.raises(data.DataError, match="no game under .* has a decisive result"):
        data.check_source(str(tmp_path), HP, full=True)
