"""Chess puzzles with a checkable best move: mate in one, or win the undefended piece (docs/methods.md §2.22)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig
from rlvr.types import Problem, Score

KINDS = ("mate", "capture")
FORMATS = ("uci", "san")
MARKER = ">"  # the answer follows the last '>' (never part of FEN, UCI or SAN)
TRACE_WORD = {"mate": "check", "capture": "take"}
PIECE_VALUES = {1: 1, 2: 3, 3: 3, 4: 5, 5: 9, 6: 0}  # python-chess piece types: P N B R Q K


@dataclass(frozen=True)
class ChessPuzzlesConfig(TaskConfig):
    kinds: str = param("mate,capture", "puzzle kinds drawn uniformly: mate (mate in one), capture (take the "
                                       "most valuable undefended piece; no mate exists)")
    min_extra: int = param(0, "fewest random extra pieces beside K, k and the white queen/rook")
    max_extra: int = param(3, "most random extra pieces (more pieces: more candidate moves, harder)")
    move_format: str = param("uci", "notation of answers and traces: uci | san")
    board_format: str = param("pieces", "how the prompt shows the position: pieces (piece + square list) | fen")
    max_candidates: int = param(4, "candidate moves listed in a demonstration's trace (the answer included)")

    def __post_init__(self) -> None:
        super().__post_init__()
        kinds = [k for k in self.kinds.split(",") if k]
        if not kinds or set(kinds) - set(KINDS):
            raise ValueError(f"chess_puzzles: kinds must be a comma list over {KINDS}, got '{self.kinds}'")
        if not 0 <= self.min_extra <= self.max_extra:
            raise ValueError(f"chess_puzzles: need 0 <= min_extra <= max_extra, got {self.min_extra}, {self.max_extra}")
        if self.board_format not in BOARD_FORMATS:
            raise ValueError(f"chess_puzzles: board_format must be one of {BOARD_FORMATS}, got '{self.board_format}'")
        if self.move_format not in FORMATS:
            raise ValueError(f"chess_puzzles: move_format must be one of {FORMATS}, got '{self.move_format}'")
        if self.max_candidates < 1:
            raise ValueError(f"chess_puzzles: max_candidates must be >= 1, got {self.max_candidates}")


@register("task", "chess_puzzles")
class ChessPuzzles(Task):
    """Find the best move of a generated position; reward 1 for a legal, correct move, else 0.

    Paper: "chess pretraining-to-RL testbed" (docs/methods.md §2.22; abstract only). Harness RECONSTRUCTION:
    puzzles are generated (sparse random endgames), not human-rated; reward ``single_move``.

    Prompt ``Kg6 Qf7 kg8 w:`` (the pieces and their squares, or FEN placement with
    ``board_format='fen'``; side to move; ``:``). The demonstration
    is a synthetic reasoning trace: the candidate moves of the puzzle's kind (checks for a mate,
    captures for a free piece), then ``>`` and the answer, e.g. ``check:f7g7,f7f8>f7g7``. The
    verifier replays the move from the stored FEN: 1.0 when it is legal and mates (mate puzzles) or
    captures a most-valuable undefended piece (capture puzzles); unparsable or illegal moves score 0.
    A second objective ``legal`` (logged as ``reward/legal``) is 1 for any legal move.
    ``meta["rating"]`` (difficulty) is the number of candidate moves of the puzzle's kind.
    """

    Config = ChessPuzzlesConfig
    needs_timeout = False  # bounded move generation on small boards
    testbed_only = ("its prompt is a bare position ('Kg6 Qf7 kg8 w:') that asks for nothing, and a reply scores "
                    "only with a move after '>', the form the preset's supervised warm start teaches; rlvr "
                    "warm-starts only the testbed model (a model.path run skips warm_start), so a pretrained "
                    "model would score 0 on every completion")
    max_new_tokens = 48

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        kind = rng.choice([k for k in cfg.kinds.split(",") if k])
        for _ in range(100_000):
            board = random_position(rng, rng.randint(cfg.min_extra, cfg.max_extra))
            if best_moves(board)[0] == kind:
                return self.puzzle(board.fen(), rng)
        raise RuntimeError(f"chess_puzzles: no {kind} puzzle found")  # pragma: no cover

    def puzzle(self, fen: str, rng: random.Random | None = None) -> Problem:
        """The puzzle of a FEN (its kind and solutions computed from the position)."""
        chess = require_chess()
        board = chess.Board(fen)
        kind, solutions = best_moves(board)
        if kind == "none":
            raise ValueError(f"chess_puzzles: {fen} has neither a mate in one nor a free capture")
        candidates = [m for m in board.legal_moves if (board.gives_check(m) if kind == "mate" else board.is_capture(m))]
        answer = (rng or random.Random(fen)).choice(sorted(solutions, key=lambda m: m.uci()))
        return Problem(prompt=f"{position_text(board, self.config.board_format)}:", answer=self._notation(board, answer),
                       meta={"fen": fen, "kind": kind, "rating": len(candidates),
                             "solutions": sorted(m.uci() for m in solutions),
                             "candidates": [m.uci() for m in candidates]})

    def verify(self, problem: Problem, completion: str) -> Score:
        chess = require_chess()
        board = chess.Board(problem.meta["fen"])
        text = parse_answer(completion)
        move = parse_move(board, text, self.config.move_format)
        if move is None:
            return Score(0.0, text, {"reason": "no legal move after '>'", "objectives": {"legal": 0.0}})
        board.push(move)
        mated = board.is_checkmate()
        board.pop()
        kind, solutions = best_moves(board)
        ok = mated if kind == "mate" else move in solutions
        meta = {"objectives": {"legal": 1.0}}  # a second objective: the answer is a legal move
        if not ok:
            meta["reason"] = f"legal but not the best ({kind})"
        return Score(1.0 if ok else 0.0, move.uci(), meta)

    def demonstration(self, problem: Problem) -> str:
        chess = require_chess()
        board = chess.Board(problem.meta["fen"])
        answer = problem.answer
        others = [u for u in problem.meta["candidates"] if self._notation(board, chess.Move.from_uci(u)) != answer]
        rng = random.Random(problem.prompt)
        listed = rng.sample(others, min(len(others), self.config.max_candidates - 1)) + [None]
        rng.shuffle(listed)
        names = [answer if u is None else self._notation(board, chess.Move.from_uci(u)) for u in listed]
        return f"{TRACE_WORD[problem.meta['kind']]}:{','.join(names)}{MARKER}{answer}"

    def _notation(self, board: object, move: object) -> str:
        return board.san(move) if self.config.move_format == "san" else move.uci()  # type: ignore[attr-defined]


def parse_answer(completion: str) -> str | None:
    """The move text after the last ``>`` up to the first separator, or None."""
    at = completion.rfind(MARKER)
    if at < 0:
        return None
    rest = completion[at + 1:].strip()
    for sep in (" ", ",", ";", "\n", ":"):
        rest = rest.split(sep, 1)[0]
    return rest or None


def parse_move(board: object, text: str | None, move_format: str = "uci") -> object | None:
    """The legal move ``text`` names in ``board`` (UCI or SAN), or None when it is unparsable or illegal."""
    chess = require_chess()
    if not text:
        return None
    try:
        move = board.parse_san(text) if move_format == "san" else chess.Move.from_uci(text)  # type: ignore[attr-defined]
    except ValueError:  # python-chess raises subclasses of ValueError for bad or illegal moves
        return None
    return move if move in board.legal_moves else None  # type: ignore[attr-defined]


# --- positions and checkable best moves (python-chess, imported on first use) --------------------

def require_chess() -> Any:
    """The ``chess`` module, or an ImportError that says how to install it."""
    try:
        import chess
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError("the chess testbed needs python-chess: pip install chess") from err
    return chess


BOARD_FORMATS = ("pieces", "fen")
_ORDER = "KQRBNP"


def position_text(board: Any, board_format: str = "pieces") -> str:
    """The position a model reads, then the side to move. ``pieces``: every piece with its square,
    white (upper case) before black, K Q R B N P, then by square (``"Kg6 Qb1 kh8 w"``) — a tiny
    model reads squares directly instead of counting FEN's empty runs; ``fen``: FEN placement
    (``"7k/8/6K1/8/8/8/8/1Q6 w"``)."""
    side = "w" if board.turn else "b"
    if board_format == "fen":
        return f"{board.board_fen()} {side}"
    if board_format != "pieces":
        raise ValueError(f"position_text: unknown board_format '{board_format}'; valid: {', '.join(BOARD_FORMATS)}")
    import chess
    placed = sorted(board.piece_map().items(),
                    key=lambda kv: (not kv[1].color, _ORDER.index(kv[1].symbol().upper()), kv[0]))
    return " ".join(f"{piece.symbol()}{chess.square_name(sq)}" for sq, piece in placed) + f" {side}"


def random_position(rng: random.Random, extra: int, heavy: str = "QR") -> Any:
    """A legal position, white to move, black not in check: K, k, a white queen or rook (from
    ``heavy``) and ``extra`` random pieces (pawns, knights, bishops, rooks of either colour)."""
    chess = require_chess()
    kinds = {"Q": chess.QUEEN, "R": chess.ROOK}
    for _ in range(10_000):
        board = chess.Board(None)
        squares = rng.sample(range(64), 3 + extra)
        board.set_piece_at(squares[0], chess.Piece(chess.KING, chess.WHITE))
        board.set_piece_at(squares[1], chess.Piece(chess.KING, chess.BLACK))
        board.set_piece_at(squares[2], chess.Piece(kinds[rng.choice(heavy)], chess.WHITE))
        for sq in squares[3:]:
            kind = rng.choice((chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK))
            if kind == chess.PAWN and chess.square_rank(sq) in (0, 7):
                kind = chess.KNIGHT  # no pawns on the back ranks
            board.set_piece_at(sq, chess.Piece(kind, rng.random() < 0.5))
        board.turn = chess.WHITE
        if board.is_valid() and not board.is_game_over():
            return board
    raise RuntimeError("random_position: no legal position found")  # pragma: no cover


def mating_moves(board: Any) -> list:
    """Every legal move that checkmates, in python-chess's move order."""
    out = []
    for move in list(board.legal_moves):
        board.push(move)
        if board.is_checkmate():
            out.append(move)
        board.pop()
    return out


def free_captures(board: Any) -> list:
    """Legal captures of the most valuable undefended enemy piece(s) (no enemy piece attacks the
    square before the capture); [] when there is none."""
    best, value = [], 0
    for move in board.legal_moves:
        target = board.piece_at(move.to_square)
        if target is None or board.attackers(target.color, move.to_square):
            continue  # not a capture (en passant ignored), or the piece is defended
        v = PIECE_VALUES[target.piece_type]
        if v > value:
            best, value = [move], v
        elif v == value:
            best.append(move)
    return best


def best_moves(board: Any) -> tuple[str, list]:
    """The checkable best moves: ("mate", mating moves) when a mate in one exists, else
    ("capture", free captures of the highest value), else ("none", [])."""
    mates = mating_moves(board)
    if mates:
        return "mate", mates
    captures = free_captures(board)
    return ("capture", captures) if captures else ("none", [])
