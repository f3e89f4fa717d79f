"""Forward + backward seconds of one uneven batch on the tiny model: padded (trimmed, length-bucketed)
micro-batches against packed, padding-free ones, at a few token budgets, with transformers' sdpa and
with row-wise sdpa (``rlvr.models.rowwise_attention``); the basis of ``optim.packing``'s default.

One process, no generation: rows with prompts of 8..14 tokens (left-padded to 16) and completions of
``--min-len`` .. ``--max-len`` tokens, the loss a plain sum of log-probs. Each setting runs
``--repeats`` times in turn (A B C, A B C, ...) and the fastest is reported: the least disturbed by
other load on a shared machine. With transformers' sdpa a pack of L tokens computes the whole L x L
score matrix under a block-diagonal mask, so at short lengths packing costs more attention than padding
saves; row-wise sdpa (``rowwise_*``) attends inside each row, at the padded pass's attention cost.

    python benchmarks/packed_update.py                              # learning-regime lengths (10..48)
    python benchmarks/packed_update.py --min-len 20 --max-len 400   # long, uneven
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--min-len", type=int, default=10, help="shortest completion")
    p.add_argument("--max-len", type=int, default=48, help="longest completion (the width T)")
    p.add_argument("--budgets", type=int, nargs="+", default=[128, 256, 512, 1024], help="packed token budgets")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    return p.parse_args(argv)


def batch(args: argparse.Namespace, vocab: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    n, p, t = args.rows, 16, args.max_len
    prompt_len = torch.randint(8, 15, (n,), generator=gen)
    completion_len = torch.randint(args.min_len, t + 1, (n,), generator=gen)
    prompt_mask = torch.arange(p)[None] >= (p - prompt_len)[:, None]  # (N, P) left-padded
    mask = torch.arange(t)[None] < completion_len[:, None]  # (N, T)
    prompt_ids = torch.randint(4, vocab, (n, p), generator=gen) * prompt_mask
    completion_ids = torch.randint(4, vocab, (n, t), generator=gen) * mask
    return prompt_ids, prompt_mask, completion_ids, mask


def settings(args: argparse.Namespace, lengths: torch.Tensor) -> dict[str, tuple[bool, list[torch.Tensor]]]:
    """name -> (packed, micro-batches); a ``rowwise_`` name runs on the row-wise sdpa copy of the model."""
    from rlvr.batching import plan_micro_batches
    from rlvr.packing import plan_token_budget
    rows = torch.arange(args.rows)
    out = {"padded_1_untrimmed": (False, [rows]),
           "padded_3_buckets": (False, plan_micro_batches(rows, 0, lengths=lengths, buckets=3))}
    for prefix in ("", "rowwise_"):
        out[f"{prefix}packed_1"] = (True, [rows])
        out[f"{prefix}packed_3_buckets"] = (True, out["padded_3_buckets"][1])
        for b in args.budgets:
            out[f"{prefix}packed_budget_{b}"] = (True, plan_token_budget(rows, lengths, b))
    return out


def step(model, data, packed: bool, groups: list[torch.Tensor], trim: bool) -> float:
    from rlvr.rollout.scoring import packed_logprobs, sequence_logprobs
    prompt_ids, prompt_mask, completion_ids, mask = data
    fn = packed_logprobs if packed else sequence_logprobs
    t0 = time.perf_counter()
    for rows in groups:
        p0 = int((~prompt_mask[rows]).all(0).sum()) if trim else 0  # leading all-padding columns
        t1 = int(mask[rows].sum(-1).max()) if trim else mask.shape[1]
        logp, _ = fn(model, prompt_ids[rows][:, p0:], prompt_mask[rows][:, p0:], completion_ids[rows][:, :t1],
                     mask[rows][:, :t1])
        (logp * mask[rows][:, :t1]).sum().backward()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    import copy

    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.models.rowwise_attention import ROWWISE_SDPA
    from rlvr.packing import packed_lengths
    model = build_tiny_model(build_char_tokenizer(), hidden=args.hidden, layers=args.layers, heads=args.heads)
    rowwise = copy.deepcopy(model)
    rowwise.set_attn_implementation(ROWWISE_SDPA)
    data = batch(args, model.config.vocab_size)
    lengths = packed_lengths(data[1], data[3])
    plans = settings(args, lengths)
    times: dict[str, list[float]] = {k: [] for k in plans}
    load = [round(os.getloadavg()[0], 2)]
    for _ in range(args.repeats + 1):  # the first round warms up and is dropped
        for name, (packed, groups) in plans.items():
            net = rowwise if name.startswith("rowwise_") else model
            times[name].append(step(net, data, packed, groups, trim=name != "padded_1_untrimmed"))
    load.append(round(os.getloadavg()[0], 2))
    width = data[0].shape[1] + data[2].shape[1]
    report = {"rows": args.rows, "completion_len": [args.min_len, args.max_len], "real_tokens": int(lengths.sum()),
              "padded_positions_untrimmed": args.rows * width, "threads": args.threads, "load_avg_1min": load,
              "fastest_s": {k: round(min(v[1:]), 4) for k, v in times.items()},
              "micro_batches": {k: len(g) for k, (_, g) in plans.items()}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
