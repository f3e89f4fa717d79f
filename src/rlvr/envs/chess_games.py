"""Chess games for the pretraining-to-RL testbed (docs/methods.md §2.22): positions, a 1-ply engine, game text.

Everything here is deterministic given a ``random.Random``. Positions are sparse random endgames
(two kings, a white queen or rook, and ``extra`` random pieces), which keeps mate-in-one and
free-capture puzzles frequent and cheap to find; games start there (or from the initial position)
and are played by a 1-ply engine: mate if it can, else take the most valuable undefended piece,
else a random legal move, with probability ``epsilon`` a random legal move instead.

Needs ``python-chess`` (``pip install chess``); it is imported on first use, so importing this
module never fails.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from rlvr.tasks.chess_puzzles import best_moves, position_text, random_position, require_chess

GAME_STYLES = ("positions", "moves")


def engine_move(board: Any, rng: random.Random, epsilon: float = 0.0) -> Any:
    """The 1-ply engine's move: a random best move (mate, then free capture), else a random legal
    move; with probability ``epsilon`` a random legal move regardless."""
    legal = list(board.legal_moves)
    if rng.random() < epsilon:
        return rng.choice(legal)
    _, best = best_moves(board)
    return rng.choice(best or legal)


@dataclass
class Game:
    """A played game: its start position (full FEN) and the moves in UCI."""

    start_fen: str
    moves: list[str] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)  # position_text before each move


def play_game(rng: random.Random, *, max_plies: int = 30, epsilon: float = 0.3, start: str = "random",
              extra: tuple[int, int] = (1, 4), board_format: str = "pieces") -> Game:
    """One game from a random sparse position (``start='random'``) or the initial position; positions
    are written in ``board_format`` (``rlvr.tasks.chess_puzzles.position_text``)."""
    chess = require_chess()
    board = chess.Board() if start == "initial" else random_position(rng, rng.randint(*extra))
    game = Game(board.fen())
    while not board.is_game_over() and len(game.moves) < max_plies:
        move = engine_move(board, rng, epsilon)
        game.positions.append(position_text(board, board_format))
        game.moves.append(move.uci())
        board.push(move)
    return game


def game_text(game: Game, style: str = "positions") -> str:
    """Game text for pretraining: ``positions`` writes one ``"<position>:<uci>"`` line per ply (the
    format puzzles are asked in); ``moves`` writes ``"<start position>:<uci> <uci> ..."`` (the start
    position in the game's first ``positions`` entry format)."""
    if style == "positions":
        return "".join(f"{p}:{m}\n" for p, m in zip(game.positions, game.moves))
    if style == "moves":
        return f"{game.positions[0] if game.positions else ''}:{' '.join(game.moves)}\n"
    raise ValueError(f"game_text: unknown style '{style}'; valid: {', '.join(GAME_STYLES)}")


def game_corpus(n_games: int, seed: int, style: str = "positions", **play: Any) -> list[str]:
    """Texts of ``n_games`` games from the stream of ``seed`` (games with no move are skipped)."""
    rng = random.Random(f"chess-games:{seed}")
    texts = []
    while len(texts) < n_games:
        game = play_game(rng, **play)
        if game.moves:
            texts.append(game_text(game, style))
    return texts
