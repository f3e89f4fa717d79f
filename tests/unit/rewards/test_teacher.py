"""First-mistake teachers (docs/methods.md §2.3): the arithmetic oracle, the step → token mapping with the
char tokenizer, reply parsing, the HTTP LLM teacher against a local 127.0.0.1 server (good,
malformed, unparsable, failing and slow replies), and the HF backend's fallback on a random model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.registry import RegistryError
from rlvr.rewards.chat_client import chat_url
from rlvr.rewards.teacher import (LLMTeacher, LLMTeacherConfig, OracleTeacher, Teacher, _token_of_step,
                                  build_teacher, first_mistake_tokens, parse_verdict)
from rlvr.tasks import Arithmetic
from rlvr.types import Problem

# 347+285: gold steps 7+5=12;4+8+1=13;3+2+1=6;#632
P = Problem(prompt="347+285=", answer="632", solution="7+5=12;4+8+1=13;3+2+1=6;#632")


# --- the oracle --------------------------------------------------------------------------------

def test_oracle_matches_the_task_step_checker():
    teacher = OracleTeacher(Arithmetic())
    assert teacher.first_mistake(P, "7+5=12;4+8+1=13;3+2+1=6;#632") is None
    assert teacher.first_mistake(P, "7+5=12;4+8=12;3+2+1=6;#632") == 1  # carry forgotten in step 2
    assert teacher.first_mistake(P, "7+5=13;4+8+1=13;3+2+1=6;#632") == 0
    assert teacher.first_mistake(P, "7+5=12;4+8+1=13;3+2+1=6;#633") == 3  # the answer is the last step
    assert teacher.stats == {"calls": 4, "mistake": 3, "no_mistake": 1, "unparsable": 0, "timeout": 0, "error": 0}
    assert teacher.step_separator == ";"


def test_oracle_needs_a_task_with_a_step_checker():
    class NoSteps:
        has_step_oracle = False
        name = "nosteps"

    with pytest.raises(ValueError, match="nosteps.*has_step_oracle=False"):
        OracleTeacher(NoSteps())
    with pytest.raises(ValueError, match="needs the task"):
        build_teacher("oracle", {})
    with pytest.raises(RegistryError, match="unknown teacher 'sage'; valid names: llm, oracle"):
        build_teacher("sage", {})
    with pytest.raises(KeyError, match="unknown parameter"):
        build_teacher("oracle", {"separator": ";"}, task=Arithmetic())


# --- step index → token index --------------------------------------------------------------------

def encode_rows(tok, texts: list[str], t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded completion ids (chars + eos) and the bool attention of the real tokens."""
    ids = torch.full((len(texts), t), tok.pad_token_id)
    att = torch.zeros(len(texts), t, dtype=torch.bool)
    for i, text in enumerate(texts):
        row = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids[i, :len(row)] = torch.tensor(row)
        att[i, :len(row)] = True
    return ids, att


def test_first_mistake_tokens_with_char_tokenizer_and_arithmetic_oracle():
    tok = build_char_tokenizer()
    texts = ["7+5=12;4+8=12;3+2+1=6;#632",  # wrong 2nd step → the char after the first ';': 7
             "7+5=12;4+8+1=13;3+2+1=6;#632",  # right → -1
             "7+5=12;"]  # stopped after step 1: step 2 is missing → the last real token (eos at 7)
    ids, att = encode_rows(tok, texts, t=32)
    m = first_mistake_tokens(OracleTeacher(Arithmetic()), [P] * 3, texts, tok, ids, att)
    assert m.dtype == torch.long and m.tolist() == [7, -1, 7]
    assert tok.decode([int(ids[0, 7])]) == "4"  # the wrong step's first character


class FixedTeacher(Teacher):
    """Returns a fixed step index, whatever it is asked."""

    def __init__(self, k):
        super().__init__()  # the base config: step_separator ';'
        self.k = k

    def first_mistake(self, problem, completion):
        return self.k


def test_methods_golden_step_lengths_3_4_5():
    # docs/methods.md §2.3 test 1: steps of 3, 4, 5 tokens ("ab;", "cde;", "fghij"), k = 2 (1-based, i.e.
    # index 1) → m = 3, the first token of the second step.
    tok = build_char_tokenizer()
    ids, att = encode_rows(tok, ["ab;cde;fghij"], t=16)
    assert first_mistake_tokens(FixedTeacher(1), [P], ["ab;cde;fghij"], tok, ids, att).tolist() == [3]
    assert first_mistake_tokens(FixedTeacher(2), [P], [], tok, ids, att).tolist() == [7]  # texts=[]: decoded
    assert first_mistake_tokens(FixedTeacher(None), [P], [], tok, ids, att).tolist() == [-1]


def test_attention_holes_and_separator_override():
    # Real tokens at positions 0, 2, 3, 4 ("a", ";", "b", eos with a hole at 1): step 1 starts at the
    # char after ';', which is token "b" at position 3. A "|" separator is never found → step 1 is
    # past the end → the last real token, position 4.
    tok = build_char_tokenizer()
    ids = torch.tensor([tok.convert_tokens_to_ids(["a", "x", ";", "b"]) + [tok.eos_token_id]])
    att = torch.tensor([[True, False, True, True, True]])
    assert first_mistake_tokens(FixedTeacher(1), [P], [], tok, ids, att).tolist() == [3]
    assert first_mistake_tokens(FixedTeacher(1), [P], [], tok, ids, att, step_separator="|").tolist() == [4]


def test_token_of_step_with_multichar_tokens():
    # Pieces "ab" | ";c" | "de" | ";" | "fg": chars 0-1, 2-3, 4-5, 6, 7-8. Step 1 starts at char 3
    # (inside ";c") → token 1; step 2 starts at char 7 → token 4; step 0 → token 0.
    pieces = ["ab", ";c", "de", ";", "fg"]
    assert [_token_of_step(pieces, k, ";") for k in (0, 1, 2, 3)] == [0, 1, 4, 4]


# --- reply parsing --------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, verdict", [
    ("first wrong step: 2", ("mistake", 1)),
    ("First Wrong Step: 1.", ("mistake", 0)),
    ("**First incorrect step:** 3", ("mistake", 2)),
    ("Step 1 is fine. The first erroneous step is step 2.", ("mistake", 1)),
    ("I checked them.\nfirst wrong step: none", ("no_mistake", None)),
    ("<think>first wrong step: 1? no...</think>first wrong step: 3", ("mistake", 2)),
    ("Answer 'first wrong step: N'... first wrong step: 2", ("mistake", 1)),  # the last phrase wins
    ("2", ("mistake", 1)),
    ("Step 3", ("mistake", 2)),
    ("None.", ("no_mistake", None)),
    ("All steps are correct", ("no_mistake", None)),
    ("first wrong step: 4", ("unparsable", None)),  # only 3 steps
    ("first wrong step: 0", ("unparsable", None)),
    ("I like turtles", ("unparsable", None)),
    ("", ("unparsable", None)),
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply, 3) == verdict


def test_chat_url():
    assert chat_url("http://h:1/v1") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1") == "http://h:1/v1/chat/completions"


def test_prompt_numbers_steps_and_shows_reference_only_with_sees_gt():
    cfg = dict(model="m", step_separator=";")
    plain = LLMTeacher(LLMTeacherConfig(**cfg, sees_gt=False)).prompt(P, "7+5=12;4+8=12")
    assert "Step 1: 7+5=12\nStep 2: 4+8=12" in plain and "347+285=" in plain and "632" not in plain
    with_gt = LLMTeacher(LLMTeacherConfig(**cfg, sees_gt=True)).prompt(P, "7+5=12;4+8=12")
    assert "Reference answer: 632" in with_gt


@pytest.mark.parametrize("params", [{"backend": "grpc", "model": "m"}, {"backend": "http"},
                                    {"backend": "hf"}, {"model": "m", "timeout_s": 0}])
def test_llm_config_is_checked(params):
    with pytest.raises(ValueError):
        LLMTeacherConfig(**params, sees_gt=False)
    LLMTeacherConfig(model="m", sees_gt=False)  # the valid baseline builds


# --- the HTTP backend against a local server --------------------------------------------------------

class ChatServer:
    """A tiny OpenAI-style chat-completions server on 127.0.0.1 whose reply depends on the problem."""

    REPLIES = {"ok=": "Step 1 is right.\nfirst wrong step: 2", "fine=": "first wrong step: none",
               "garbage=": "I like turtles", "range=": "first wrong step: 9"}

    def __init__(self):
        self.requests: list[dict] = []
        self.release = threading.Event()  # the slow handler waits for it (the client gives up first)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                prompt = body["messages"][-1]["content"]
                key = next((k for k in ("ok=", "fine=", "garbage=", "range=", "bad=", "fail=", "slow=")
                            if f"Problem: {k}" in prompt), "")
                if key == "slow=":
                    outer.release.wait(10)
                if key == "fail=":
                    self.send_response(500)
                    self.end_headers()
                    return
                payload = b"{not json" if key == "bad=" else json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": outer.REPLIES.get(key, "")}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def teacher_for(server, **kw) -> LLMTeacher:
    cfg = dict(backend="http", base_url=server.url, model="judge-1", step_separator=";", timeout_s=10.0,
               api_key_env="RLVR_TEST_TEACHER_KEY", sees_gt=False)
    return LLMTeacher(LLMTeacherConfig(**{**cfg, **kw}))


def prob(prompt: str) -> Problem:
    return Problem(prompt=prompt, answer="1")


def test_http_teacher_parses_replies_and_sends_the_request(server, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_TEACHER_KEY", "sekrit")
    teacher = teacher_for(server)
    assert teacher.first_mistake(prob("ok="), "a;b;c") == 1
    assert teacher.first_mistake(prob("fine="), "a;b;c") is None
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["model"] == "judge-1"
    assert req["auth"] == "Bearer sekrit" and req["temperature"] == 0.0
    assert "Step 3: c" in req["messages"][-1]["content"]
    assert teacher.stats == {"calls": 2, "mistake": 1, "no_mistake": 1, "unparsable": 0, "timeout": 0, "error": 0}


def test_http_teacher_without_key_sends_no_authorization(server, monkeypatch):
    monkeypatch.delenv("RLVR_TEST_TEACHER_KEY", raising=False)
    assert teacher_for(server).first_mistake(prob("ok="), "a;b") == 1
    assert server.requests[0]["auth"] is None


@pytest.mark.parametrize("prompt, stat", [("garbage=", "unparsable"), ("range=", "unparsable"),
                                          ("bad=", "error"), ("fail=", "error")])
def test_http_teacher_falls_back_to_no_mistake(server, prompt, stat):
    teacher = teacher_for(server)
    assert teacher.first_mistake(prob(prompt), "a;b;c") is None
    assert teacher.stats[stat] == 1 and teacher.stats["calls"] == 1
    assert teacher.stats["mistake"] == teacher.stats["no_mistake"] == 0
    assert teacher.last_error.startswith(stat)


def test_http_teacher_times_out_and_falls_back(server):
    teacher = teacher_for(server, timeout_s=0.3)
    assert teacher.first_mistake(prob("slow="), "a;b") is None
    assert teacher.stats["timeout"] == 1 and teacher.stats["error"] == 0


def test_unreachable_server_is_an_error_not_an_exception(server):
    url = server.url
    server.close()  # nothing listens on that port any more
    teacher = LLMTeacher(LLMTeacherConfig(backend="http", base_url=url, model="m", timeout_s=2.0, sees_gt=False))
    assert teacher.first_mistake(prob("ok="), "a") is None
    assert teacher.stats["error"] == 1


def test_http_batch_keeps_order_with_concurrency(server):
    teacher = teacher_for(server, max_workers=4)
    problems = [prob(p) for p in ("ok=", "fine=", "garbage=", "ok=", "fine=", "ok=")]
    assert teacher.first_mistakes(problems, ["a;b;c"] * 6) == [1, None, None, 1, None, 1]
    assert teacher.stats["calls"] == 6 and teacher.stats["mistake"] == 3


def test_first_mistake_tokens_through_the_http_teacher(server):
    # "ok=" → "first wrong step: 2" → index 1 → the char after the first ';' of "ab;cd;e" = position 3.
    tok = build_char_tokenizer()
    texts = ["ab;cd;e", "ab;cd;e"]
    ids, att = encode_rows(tok, texts, t=10)
    m = first_mistake_tokens(teacher_for(server), [prob("ok="), prob("garbage=")], texts, tok, ids, att)
    assert m.tolist() == [3, -1]


# --- the HF backend with a tiny random model (garbage out → the fallback) ------------------------

def test_hf_teacher_random_model_falls_back(tmp_path):
    tok = build_char_tokenizer()
    build_tiny_model(tok, hidden=32, layers=1, heads=2, max_positions=1024).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    teacher = LLMTeacher(LLMTeacherConfig(backend="hf", model_path=str(tmp_path), device="cpu", sees_gt=False,
                                          max_new_tokens=8, step_separator=";", timeout_s=60.0))
    assert teacher.first_mistake(P, "7+5=12;4+8=12") is None
    assert teacher.stats["calls"] == 1 and teacher.stats["unparsable"] == 1
    assert "unparsable" in teacher.last_error
