"""Steps per second with generation overlapped with training (``rollout.async_rollout``), and seconds per
100 MB of weight sync: the server engine's HTTP safetensors-chunk path vs the gloo broadcast.

Modes, each in its own Python process (no shared thread pools):

* ``one_process``: today's loop, one process at ``--threads-one`` (2) torch threads;
* ``sync``: the same two processes as async (trainer 1 thread + generator worker 1 thread), the worker
  generating one step at a time (``in_worker: true``, k = 0): the trainer waits for every batch;
* ``async_k1`` / ``async_k2``: the worker runs 1 or 2 steps ahead (``max_staleness`` 1, 2).

Every mode trains the same tiny model from its random init (no warm start, so completions run to the
length cap and every step generates the same number of tokens) with ``ppo_clip_is`` and
``--ppo-epochs`` passes over each batch, chosen so the update costs about what generation does (the
report gives each mode's mean generation seconds per step — ``timing/rollout`` in one process, the worker's busy seconds
otherwise — and update seconds, the trainer's forward, loss, backward and optimizer phases; tune
``--ppo-epochs`` until they match). Steps per second: ``(steps - warmup) / (time of the last step end - time of the
warm-up's last step end)``.

Weight sync: ``--sync-mb`` MB of float32 parameters from this process to a receiver process, best of
``--sync-repeats``: (a) ``http``: safetensors chunks of 64 MB, base64 in a JSON body, POSTed to a local
HTTP server that decodes and copies them in (``vllm_server``'s encoding, ``rlvr.rollout.engines.vllm_worker``,
without vLLM); (b) ``gloo``: ``rlvr.rollout.weight_sync.WeightSync`` buckets of 64 MB, acknowledged
by the receiver after it copied them in.

    python benchmarks/async_speed.py                 # prints one JSON object
    python benchmarks/async_speed.py --steps 6 --warmup 2 --sync-mb 20   # a quick check that it works
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MODES = {"one_process": [], "sync": ["rollout.async_rollout.in_worker=true"],
         "async_k1": ["rollout.async_rollout.max_staleness=1"], "async_k2": ["rollout.async_rollout.max_staleness=2"]}


UPDATE_PHASES = ("advantage", "reweight", "loss", "update")  # the trainer's stages after verification, timed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=24, help="steps per mode (warm-up included)")
    p.add_argument("--warmup", type=int, default=4, help="first steps left out of the rate")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="completion length cap (T)")
    p.add_argument("--hidden", type=int, default=256, help="tiny model hidden size")
    p.add_argument("--layers", type=int, default=4, help="tiny model layers")
    p.add_argument("--ppo-epochs", type=int, default=8, help="passes over each batch (balances update vs generation)")
    p.add_argument("--threads-one", type=int, default=2, help="torch threads of the one-process loop")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    p.add_argument("--sync-mb", type=float, default=100.0, help="MB of weights in the sync benchmark (0 = skip)")
    p.add_argument("--sync-repeats", type=int, default=3, help="syncs per path (the best is reported)")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def overrides(args: argparse.Namespace, mode: str, out: str) -> list[str]:
    threads = args.threads_one if mode == "one_process" else 1
    return ["task.name=arithmetic", "warm_start.steps=0", f"model.hidden={args.hidden}",
            f"model.layers={args.layers}", f"rollout.prompts_per_step={args.prompts}",
            f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
            "rollout.verify_workers=0", "algorithm.loss.name=ppo_clip_is", f"optim.ppo_epochs={args.ppo_epochs}",
            f"run.steps={args.steps}", "run.eval_every=0", "run.save_every=0", f"run.threads={threads}",
            "rollout.async_rollout.generator_threads=1", f"run.out_dir={out}", "run.overwrite=true",
            *MODES[mode]]


def run_mode(args: argparse.Namespace) -> dict:
    """In the child process: train one mode and time its steps."""
    from rlvr.train.config import load_config
    from rlvr.train.logging import read_metrics
    from rlvr.train.trainer import Trainer
    out = tempfile.mkdtemp(prefix=f"async_speed_{args.child}_")
    ends: list[float] = []
    stamp = type("Stamp", (), {"on_step_end": lambda self, t, s, m: ends.append(time.perf_counter())})()
    Trainer(load_config(None, overrides(args, args.child, out)), callbacks=[stamp]).train()
    rows = read_metrics(out)[args.warmup:]
    mean = lambda key: sum(r.get(key, 0.0) for r in rows) / max(1, len(rows))  # noqa: E731
    rate = (len(ends) - args.warmup) / (ends[-1] - ends[args.warmup - 1])
    update = sum(mean(f"timing/{k}") for k in UPDATE_PHASES)
    generation = mean("async/generator_busy_seconds") if args.child != "one_process" else mean("timing/rollout")
    report = {"steps_per_s": rate, "generation_s": generation, "update_s": update, "step_s": mean("timing/step"),
              "reward": mean("reward/mean")}
    if args.child != "one_process":
        report.update({k: mean(f"async/{k}") for k in ("staleness_mean", "trainer_idle_frac", "generator_idle_frac",
                                                       "sync_seconds", "dropped_rows")})
    return report


class Blob(torch.nn.Module):
    """Float32 parameters of the given sizes (the weights a sync moves)."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        self.parts = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(n)) for n in sizes])


def _sizes(mb: float) -> list[int]:
    n = int(mb * 1e6 / 4)  # float32 elements
    chunk = 4_000_000  # 16 MB tensors, as a large layer's
    return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])


def _gloo_receiver(port: int, sizes: list[int], repeats: int, acks) -> None:
    from rlvr.rollout.weight_sync import WeightSync
    torch.set_num_threads(1)
    model = Blob(sizes)
    sync = WeightSync(WeightSync.client_store(port, 120.0), 1, 120.0, 64.0, 120.0)
    for _ in range(repeats):
        sync.receive(model)
        acks.put(float(model.parts[0][:8].detach().sum()))


def _http_receiver(sizes: list[int], ports) -> None:
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from rlvr.rollout.engines.vllm_worker import decode_weights
    torch.set_num_threads(1)
    params = dict(Blob(sizes).named_parameters())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with torch.no_grad():
                for name, tensor in decode_weights(json.loads(body)["args"][0]).items():
                    params[name].copy_(tensor)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    ports.put(server.server_port)
    server.serve_forever()


def _time_gloo(model: Blob, sizes: list[int], repeats: int) -> list[float]:
    import torch.multiprocessing as mp
    from rlvr.rollout.weight_sync import WeightSync
    ctx = mp.get_context("spawn")
    store, acks = WeightSync.store(0, 120.0), ctx.Queue()
    proc = ctx.Process(target=_gloo_receiver, args=(store.port, sizes, repeats, acks), daemon=True)
    proc.start()
    sync, times = WeightSync(store, 0, 120.0, 64.0, 120.0), []
    for _ in range(repeats):
        start = time.perf_counter()
        sync.send(model)
        sync.wait()
        got = acks.get(timeout=300)
        times.append(time.perf_counter() - start)
        assert abs(got - float(model.parts[0][:8].detach().sum())) < 1e-4, "gloo sync: the receiver holds other weights"
    proc.join(30)
    return times


def _time_http(model: Blob, sizes: list[int], repeats: int) -> list[float]:
    import urllib.request
    import torch.multiprocessing as mp
    from rlvr.rollout.engines.vllm_worker import chunk_weights, encode_weights
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=_http_receiver, args=(sizes, ports), daemon=True)
    proc.start()
    url, times = f"http://127.0.0.1:{ports.get(timeout=120)}/collective_rpc", []
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    for _ in range(repeats):
        start = time.perf_counter()
        for chunk in chunk_weights(named, 64 * 2**20):
            body = json.dumps({"method": "rlvr_stage_weights", "args": [encode_weights(chunk)]}).encode()
            request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=600).read()
        times.append(time.perf_counter() - start)
    proc.kill()
    return times


def sync_seconds(mb: float, repeats: int) -> dict:
    """Best seconds per 100 MB of each path (all times kept), trainer → receiver process."""
    sizes = _sizes(mb)
    model = Blob(sizes)
    with torch.no_grad():
        for p in model.parts:
            p.normal_()
    out = {"mb": mb}
    for name, fn in (("http_safetensors", _time_http), ("gloo_broadcast", _time_gloo)):
        times = fn(model, sizes, repeats)
        out[name] = {"best_s_per_100mb": min(times) * 100 / mb, "all_s": times}
    out["http_over_gloo"] = out["http_safetensors"]["best_s_per_100mb"] / out["gloo_broadcast"]["best_s_per_100mb"]
    return out


def spawn_mode(mode: str, argv: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, __file__, *argv, "--child", mode], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_mode(args)))
        return
    report: dict = {"load_before": os.getloadavg()[0], "cpus": os.cpu_count(), "settings": {
        k: getattr(args, k) for k in ("steps", "warmup", "prompts", "group", "max_new_tokens", "hidden", "layers",
                                      "ppo_epochs", "threads_one")}}
    modes = [m for m in args.modes.split(",") if m]
    report["modes"] = {m: spawn_mode(m, argv) for m in modes}
    rates = {m: r.get("steps_per_s") for m, r in report["modes"].items()}
    if rates.get("sync"):
        report["speedup_over_sync"] = {m: rates[m] / rates["sync"] for m in rates if rates[m]}
    if args.sync_mb > 0:
        report["weight_sync_s_per_100mb"] = sync_seconds(args.sync_mb, args.sync_repeats)
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # this checkout's rlvr, not an installed one
    main()
