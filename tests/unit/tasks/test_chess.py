"""Chess testbed: the puzzle verifier on hand-picked positions, puzzle generation, game text and the
diagnostics of rlvr.analysis.chess on synthetic numbers with known answers."""

from __future__ import annotations

import math
import random

import pytest

from rlvr.analysis.chess import amplify_vs_surface, fit_line, pretraining_report, reward_slope

chess = pytest.importorskip("chess")

from rlvr.registry import build  # noqa: E402
from rlvr.tasks.chess_puzzles import ChessPuzzles, parse_answer  # noqa: E402

# Hand-picked positions (white to move) and their mating moves, worked out by hand:
MATES = {
    # back rank: Ra8# (f7 g7 h7 pawns block the king; the rook covers f8 and h8)
    "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1": {"a1a8"},
    # two rooks on the back rank: either one mates on the 8th rank
    "6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1": {"a1a8", "e1e8"},
    # king and queen: Qb8# (g7, h7 covered by Kg6, g8 by the queen); Qh1+ leaves g8, Qb2+ leaves g8
    "7k/8/6K1/8/8/8/8/1Q6 w - - 0 1": {"b1b8"},
    # scholar's mate: Qxf7# (the bishop on c4 guards f7)
    "r1bqkb1r/pppp1ppp/2n2n2/4p2Q/2B1P3/8/PPPP1PPP/RNB1K1NR w KQkq - 4 4": {"h5f7"},
}


@pytest.mark.parametrize("fen", sorted(MATES))
def test_verifier_accepts_exactly_the_mating_moves(fen):
    task = ChessPuzzles()
    problem = task.puzzle(fen)
    assert problem.meta["kind"] == "mate"
    board = chess.Board(fen)
    accepted = {m.uci() for m in board.legal_moves if task.verify(problem, f"check:x>{m.uci()}").value == 1.0}
    assert accepted == MATES[fen]
    assert set(problem.meta["solutions"]) == MATES[fen] and problem.answer in MATES[fen]


def test_verifier_scores_illegal_and_unparsable_moves_zero():
    task = ChessPuzzles()
    problem = task.puzzle("6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1")
    for text in ("a1a8", ">a1h8", ">a1a9", ">", ">Ra8#", ">e1e2"):  # no marker, illegal, bad square, empty, SAN in uci mode
        score = task.verify(problem, text)
        assert score.value == 0.0 and score.meta["objectives"]["legal"] == 0.0, text
    good = task.verify(problem, "check:a1a8>a1a8")
    assert good.value == 1.0 and good.parsed == "a1a8" and good.meta["objectives"]["legal"] == 1.0
    legal_wrong = task.verify(problem, ">a1a7")
    assert legal_wrong.value == 0.0 and legal_wrong.meta["objectives"]["legal"] == 1.0


def test_san_format_accepts_the_mate_in_san():
    task = build("task", "chess_puzzles", move_format="san")
    problem = task.puzzle("6k1/5ppp/8/8/8/8/8/R3R1K1 w - - 0 1")
    assert task.verify(problem, ">Ra8#").value == 1.0 and task.verify(problem, ">Re8").value == 1.0
    assert task.verify(problem, ">Ra7").value == 0.0
    assert problem.answer in ("Ra8#", "Re8#") and task.demonstration(problem).endswith(">" + problem.answer)


def test_capture_puzzle_accepts_only_the_free_capture():
    # The black queen on d5 is undefended (the king on e8 does not reach d5); no mate exists.
    task = ChessPuzzles()
    fen = "4k3/8/8/3q4/8/8/8/3RK3 w - - 0 1"
    problem = task.puzzle(fen)
    assert problem.meta["kind"] == "capture" and problem.answer == "d1d5"
    board = chess.Board(fen)
    accepted = {m.uci() for m in board.legal_moves if task.verify(problem, ">" + m.uci()).value == 1.0}
    assert accepted == {"d1d5"}


def test_generated_puzzles_are_solved_by_their_demonstration():
    task = build("task", "chess_puzzles", max_extra=2)
    problems = task.problems(12, seed=3)
    assert {p.meta["kind"] for p in problems} == {"mate", "capture"}
    for p in problems:
        demo = task.demonstration(p)
        assert task.verify(p, demo).value == 1.0, (p.prompt, demo)
        assert parse_answer(demo) == p.answer and p.prompt.endswith(" w:")
        assert p.meta["rating"] >= 1 and p.answer in p.meta["solutions"]
    assert [p.prompt for p in task.problems(12, seed=3)] == [p.prompt for p in problems]  # deterministic


def test_game_text_replays_as_legal_moves():
    from rlvr.envs.chess_games import game_corpus, game_text, play_game
    game = play_game(random.Random(0), max_plies=10)
    board = chess.Board(game.start_fen)
    for move in game.moves:
        assert chess.Move.from_uci(move) in board.legal_moves
        board.push_uci(move)
    lines = game_text(game, "positions").splitlines()
    assert len(lines) == len(game.moves) and lines[0].endswith(":" + game.moves[0])
    assert game_text(game, "moves").rstrip("\n").endswith(" ".join(game.moves))
    assert game_corpus(3, seed=1) == game_corpus(3, seed=1)


def test_engine_plays_the_mate_when_it_has_one():
    from rlvr.envs.chess_games import engine_move
    board = chess.Board("6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1")
    assert engine_move(board, random.Random(0), epsilon=0.0).uci() == "a1a8"


# --- diagnostics on synthetic policy pairs ------------------------------------------------------

def test_amplify_vs_surface_on_a_known_pair():
    # ratings 1,1,5,5 -> median split 1: easy = puzzles 0,1; hard = puzzles 2,3.
    # easy: both present (p >= 0.1), gains 0.2 and 0.1 -> amplify 0.15; no absent puzzle -> surface NaN.
    # hard: both absent (0.0, 0.05); puzzle 2 reaches 0.5 >= 0.1, puzzle 3 stays 0.05 -> surface 0.5.
    out = amplify_vs_surface([0.6, 0.8, 0.0, 0.05], [0.8, 0.9, 0.5, 0.05], [1, 1, 5, 5])
    assert out["easy"]["amplify"] == pytest.approx(0.15) and math.isnan(out["easy"]["surface"])
    assert out["hard"]["surface"] == pytest.approx(0.5) and math.isnan(out["hard"]["amplify"])
    assert out["easy"]["p_before"] == pytest.approx(0.7) and out["hard"]["p_after"] == pytest.approx(0.275)
    assert out["easy"]["puzzles"] == 2 and out["hard"]["puzzles"] == 2


def test_fit_line_and_reward_slope_are_exact_on_lines():
    # y = 2x + 1 exactly: slope 2, intercept 1, r 1; a decreasing line has r = -1.
    assert fit_line([0, 1, 2], [1, 3, 5]) == pytest.approx({"slope": 2.0, "intercept": 1.0, "r": 1.0})
    assert fit_line([0, 1, 2], [5, 3, 1])["r"] == pytest.approx(-1.0)
    # only the first K=3 steps count: 0.1, 0.2, 0.3 -> slope 0.1 (the later jump is ignored)
    assert reward_slope([0.1, 0.2, 0.3, 0.9, 0.0], window=3) == pytest.approx(0.1)


def test_pretraining_report_regresses_accuracy_on_loss():
    # Two runs: loss 2.0 -> accuracy 0.1, loss 1.0 -> accuracy 0.3: slope -0.2 per nat, r = -1.
    runs = [{"params": 1, "pretrain_tokens": t, "pretrain_loss": loss, "accuracy_sft": 0.0, "accuracy_rl": acc,
             "rl_rewards": [0.0, s, 2 * s], "p_sft": [0.0, 0.5], "p_rl": [0.5, 0.5], "ratings": [1, 2]}
            for t, loss, acc, s in ((100.0, 2.0, 0.1, 0.01), (300.0, 1.0, 0.3, 0.03))]
    report = pretraining_report(runs, slope_window=3)
    assert report["accuracy_rl_vs_pretrain_loss"]["slope"] == pytest.approx(-0.2)
    assert report["accuracy_rl_vs_pretrain_loss"]["r"] == pytest.approx(-1.0)
    # slopes 0.01 and 0.03 at 100 and 300 tokens: 1e-4 per token
    assert report["slope_vs_pretrain_tokens"]["slope"] == pytest.approx(1e-4)



def test_position_text_lists_pieces_with_squares():
    from rlvr.tasks.chess_puzzles import position_text
    board = chess.Board("7k/8/6K1/8/8/8/8/1Q6 w - - 0 1")
    # white first (K before Q), then black; FEN placement on request
    assert position_text(board) == "Kg6 Qb1 kh8 w"
    assert position_text(board, "fen") == "7k/8/6K1/8/8/8/8/1Q6 w"
    fen_task = build("task", "chess_puzzles", board_format="fen")
    assert fen_task.puzzle("7k/8/6K1/8/8/8/8/1Q6 w - - 0 1").prompt == "7k/8/6K1/8/8/8/8/1Q6 w:"
