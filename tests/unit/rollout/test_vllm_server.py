"""``rollout.engine: vllm_server`` without vLLM: the client against a stand-in server on 127.0.0.1.

The stand-in speaks the three things the engine uses (``/v1/models``, ``/v1/completions`` with token
ids, the dev-mode ``/collective_rpc`` + ``/reset_prefix_cache``) and keeps what it received, so the
tests check the requests (per-row seeds, stop ids, sampling settings), the weight pushes (when, how
many, and that they decode to the policy's weights), and the one-line errors. The real server is
exercised in ``tests/e2e/test_vllm_server_live.py`` (``make test-vllm``).
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate
from rlvr.rollout.engines import vllm_server
from rlvr.rollout.engines.vllm_server import (VLLMServerConfig, VLLMServerEngine, VLLMServerError, completion_of,
                                             sync_server_weights)
from rlvr.rollout.engines.vllm_worker import chunk_weights, decode_weights, encode_weights, model_signature

VOCAB_SEEN = 97  # the stand-in's "model" emits ids below this


class FakeVLLM:
    """A stand-in vLLM server: deterministic completions, recorded requests and weight chunks."""

    def __init__(self, signature: dict, dev_mode: bool = True, models: tuple[str, ...] = ("tiny",)) -> None:
        self.signature, self.dev_mode, self.models = signature, dev_mode, list(models)
        self.completions: list[dict] = []
        self.staged: dict = {}
        self.applied: list[dict] = []
        self.resets = 0
        self.lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def completion(self, body: dict) -> dict:
        """Token j = 2 + (sum(prompt) + seed + 7 j) mod 97, up to a stop id (included), log-prob −(j+1)/10."""
        ids: list[int] = []
        for j in range(body["max_tokens"]):
            ids.append(2 + (sum(body["prompt"]) + (body["seed"] or 0) + 7 * j) % VOCAB_SEEN)
            if ids[-1] in body["stop_token_ids"]:
                break
        logprobs = [-(j + 1) / 10 for j in range(len(ids))]
        return {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": logprobs}}]}

    def answer(self, path: str, body: dict | None) -> tuple[int, object]:
        if path == "/v1/models":
            return 200, {"data": [{"id": m} for m in self.models]}
        if path == "/v1/completions":
            if body["model"] not in self.models:
                return 404, {"error": {"message": f"The model `{body['model']}` does not exist."}}
            with self.lock:
                self.completions.append(body)
            return 200, self.completion(body)
        if not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if path == "/reset_prefix_cache":
            self.resets += 1
            return 200, {"success": True}
        method = body["method"]
        if method == "rlvr_signature":
            return 200, {"results": [dict(self.signature)]}
        if method == "rlvr_stage_weights":
            self.staged.update(decode_weights(body["args"][0]))
            return 200, {"results": [len(self.staged)]}
        if method == "rlvr_apply_weights":
            self.applied.append(self.staged)
            self.staged = {}
            return 200, {"results": [len(self.applied[-1])]}
        return 500, {"error": {"message": f"'CPUWorker' object has no attribute '{method}'"}}

    def _handler(self) -> type:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, body: dict | None) -> None:
                code, out = fake.answer(self.path, body)
                raw = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._reply(None)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                self._reply(json.loads(self.rfile.read(length) or b"{}"))

            def log_message(self, *args) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def policy():
    tok = build_char_tokenizer()
    return build_tiny_model(tok, hidden=16, layers=1, heads=2, seed=0), tok


@pytest.fixture
def server(policy):
    fake = FakeVLLM({**model_signature(policy[0].config), "logprobs_mode": "processed_logprobs"})
    yield fake
    fake.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- pure pieces ------------------------------------------------------------------------------------

def test_listed_with_its_options_and_config_checked(tmp_path, capsys):
    from rlvr.cli import main
    from tests.helpers.tiny import tiny_config
    assert main(["list", "--kind", "engine", "--json"]) == 0
    engines = {p["name"]: p for p in json.loads(capsys.readouterr().out)["plugins"]}
    assert {"base_url", "model", "timeout_s", "retries", "max_concurrency", "sync", "sync_chunk_mb"} == \
        {f["name"] for f in engines["vllm_server"]["params"]}
    with pytest.raises(ValueError, match="sync must be one of"):
        VLLMServerConfig(sync="sometimes")
    with pytest.raises(ValueError, match="base_url must start with http"):
        VLLMServerConfig(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="max_concurrency >= 1"):
        VLLMServerConfig(max_concurrency=0)
    cfg = tiny_config(str(tmp_path), ["rollout.engine=vllm_server", "rollout.engine_params.base_url=http://h:1"])
    assert cfg.rollout.engine.params["base_url"] == "http://h:1"  # no server is contacted at config time


def test_weight_chunks_round_trip_with_tied_embeddings(policy):
    model, _ = policy
    weights = list(model.state_dict().items())
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    back = decode_weights(encode_weights(weights))  # tied tensors are copied, not refused
    assert back.keys() == dict(weights).keys()
    assert all(torch.equal(back[k], v) for k, v in weights)
    sizes = [4 * 10, 4 * 10, 4 * 30, 4 * 5]  # bytes of four float32 tensors
    named = [(f"w{i}", torch.zeros(n // 4)) for i, n in enumerate(sizes)]
    groups = [[name for name, _ in g] for g in chunk_weights(named, max_bytes=100)]
    assert groups == [["w0", "w1"], ["w2"], ["w3"]]  # 80 B; 120 B alone (over the budget); 20 B


def test_completion_parsing():
    ids, lps = completion_of({"token_ids": [5, 9], "logprobs": {"token_logprobs": [-0.5, -1.0]}})
    assert (ids, lps) == ([5, 9], [-0.5, -1.0])
    older = {"logprobs": {"tokens": ["token_id:12", "token_id:3"], "token_logprobs": [-0.1, -0.2]}}
    assert completion_of(older) == ([12, 3], [-0.1, -0.2])
    with pytest.raises(VLLMServerError, match="no log-probs"):
        completion_of({"token_ids": [1], "logprobs": None})


def test_unreachable_server_is_one_clear_line(policy, monkeypatch):
    monkeypatch.setattr(vllm_server.time, "sleep", lambda s: None)
    model, tok = policy
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(VLLMServerError) as err:
        generate(model, tok, ["1+1="], max_new_tokens=2, engine="vllm_server",
                 engine_params={"base_url": url, "retries": 2})
    msg = str(err.value)
    assert "\n" not in msg and f"cannot reach {url}" in msg and "after 3 attempt(s)" in msg


# --- against the stand-in server --------------------------------------------------------------------

def test_generation_pushes_weights_only_when_they_changed(policy, server):
    model, tok = policy
    params = {"base_url": server.url, "sync_chunk_mb": 0.01}  # ~10 kB chunks: several per push
    prompts = ["12+7=", "12+7=", "9*3="]
    gen = generate(model, tok, prompts, max_new_tokens=6, temperature=0.7, top_k=5, seed=11,
                   engine="vllm_server", engine_params=params)
    assert len(server.applied) == 1 and server.resets == 1 and gen.stats["rollout/vllm_weight_syncs"] == 1.0
    pushed = server.applied[0]
    assert pushed.keys() == model.state_dict().keys()
    assert all(torch.equal(pushed[k], v) for k, v in model.state_dict().items())
    bodies = sorted(server.completions, key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [11, 12, 13]  # one request per row, its own seed: repeats differ
    assert all(b["temperature"] == 0.7 and b["top_k"] == 5 and b["logprobs"] == 0 and b["model"] == "tiny"
               and b["stop_token_ids"] == [tok.eos_token_id] for b in bodies)
    row = server.completion(bodies[0])["choices"][0]
    assert gen.completion_ids[0, :len(row["token_ids"])].tolist() == row["token_ids"]
    m = gen.completion_mask
    assert torch.allclose(gen.logprobs[0][m[0]], torch.tensor(row["logprobs"]["token_logprobs"])[:int(m[0].sum())])

    generate(model, tok, prompts, max_new_tokens=6, seed=11, engine="vllm_server", engine_params=params)
    assert len(server.applied) == 1  # unchanged policy: nothing pushed
    model(torch.tensor([[5, 6]])).logits.sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    gen = generate(model, tok, prompts, max_new_tokens=6, seed=11, engine="vllm_server", engine_params=params)
    assert len(server.applied) == 2 and gen.stats["rollout/vllm_weight_syncs"] == 1.0
    assert all(torch.equal(server.applied[1][k], v) for k, v in model.state_dict().items())


def test_stop_token_ends_a_row(policy, server):
    model, tok = policy
    eos = tok.eos_token_id
    assert eos == 2  # the stand-in emits 2 + (s + 7 j) mod 97: eos within 97 tokens, whatever s is
    gen = generate(model, tok, ["5"], max_new_tokens=100, do_sample=False, engine="vllm_server",
                   engine_params={"base_url": server.url, "sync": "off"})
    sent = server.completions[0]
    assert sent["temperature"] == 0.0 and sent["seed"] is None  # greedy
    ids = server.completion(sent)["choices"][0]["token_ids"]
    assert ids[-1] == eos and len(ids) < 100  # the server stopped at eos and returned it
    assert gen.lengths.item() == len(ids) and gen.completion_ids[0, len(ids) - 1] == eos
    assert not server.applied  # sync: off


def test_manual_sync_and_rank_other_than_zero(policy, server, monkeypatch):
    model, tok = policy
    params = {"base_url": server.url, "sync": "manual"}
    generate(model, tok, ["1"], max_new_tokens=2, engine="vllm_server", engine_params=params)
    assert not server.applied  # manual: nothing pushed by generate
    assert sync_server_weights(model) and len(server.applied) == 1
    barriers = []
    monkeypatch.setattr(vllm_server, "_rank", lambda: 1)
    monkeypatch.setattr(vllm_server, "_barrier", lambda: barriers.append(1))
    assert sync_server_weights(model)  # rank 1: waits for rank 0's push, pushes nothing itself
    assert len(server.applied) == 1 and barriers == [1]
    assert sync_server_weights(torch.nn.Linear(2, 2)) is False  # no engine for that model


def test_another_model_is_refused(policy):
    model, tok = policy
    fake = FakeVLLM({**model_signature(model.config), "vocab_size": 151936, "logprobs_mode": "processed_logprobs"})
    try:
        with pytest.raises(VLLMServerError, match=r"serves another model than the policy \(server vs policy: "
                                                  rf"vocab_size 151936 vs {len(tok)}\)"):
            generate(model, tok, ["1"], max_new_tokens=2, engine="vllm_server", engine_params={"base_url": fake.url})
        assert not fake.applied and not fake.completions  # refused before anything was sent
        with pytest.raises(VLLMServerError, match=r"serves \['tiny'\], not 'qwen'"):
            generate(model, tok, ["1"], max_new_tokens=2, engine="vllm_server",
                     engine_params={"base_url": fake.url, "model": "qwen"})
    finally:
        fake.close()


def test_server_without_dev_mode(policy):
    model, tok = policy
    fake = FakeVLLM(model_signature(model.config), dev_mode=False)
    try:
        with pytest.raises(VLLMServerError, match="VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
                                                  "rlvr.rollout.engines.vllm_worker.WeightReceiver"):
            generate(model, tok, ["1"], max_new_tokens=2, engine="vllm_server", engine_params={"base_url": fake.url})
        gen = generate(model, tok, ["1"], max_new_tokens=2, engine="vllm_server",
                       engine_params={"base_url": fake.url, "sync": "off"})  # generation alone needs no dev mode
        assert gen.completion_mask.any()
    finally:
        fake.close()


def test_engine_object_defaults():
    engine = VLLMServerEngine()
    assert engine.config.base_url == "http://127.0.0.1:8000" and engine.synced_version is None
