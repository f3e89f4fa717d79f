"""SpecRoll: speculative rollouts that leave the sampling distribution unchanged (docs/methods.md §2.11).

Selected with ``rollout.engine: specroll`` (options inside the spec, ``rollout.engine: {name: specroll, ...}``, see
:class:`SpecRollConfig`; ``rlvr list --kind engine``). One decode iteration, for every unfinished row at once:

1. sample the next token ``c`` from the target's distribution (exact: plain sampling);
2. K future-token heads (:mod:`rlvr.rollout.draft_heads`) read the hidden state ``h`` that gave
   that distribution and propose ``d_1..d_K`` (drafts from ``q_k = softmax(head_k(h + δ) / τ)``);
3. one target forward over ``[c, d_1..d_K]`` (batched over rows, one shared KV cache) gives the
   target's distributions ``p_1..p_{K+1}``;
4. standard speculative sampling: accept ``d_j`` with probability ``min(1, p_j(d_j) / q_j(d_j))``
   while they are accepted; at the first rejection the next token is drawn from
   ``norm(max(0, p_j − q_j))``; if all K are accepted it is drawn from ``p_{K+1}`` (the bonus).

Each committed token therefore has exactly the target's conditional distribution (including
temperature and top-k / top-p), and its log-prob is reported from the target's logits under the
convention of :mod:`rlvr.rollout.hf` (``log softmax(z / T)[y]`` before filtering). Rejected
drafts stay in the KV cache as masked slots (attention mask 0) rather than being cropped: rows
accept different numbers of drafts, and a per-row hole keeps the cache one rectangular batch.
Greedy decoding (``do_sample=False``) is the same rule with one-hot p and q: a draft is kept
iff it is the target's argmax, so outputs equal plain greedy decoding.

Verification is a single chain per row (no tree): a tree multiplies the verified tokens per
forward by its width, and on the CPU testbed the verify forward is compute-bound, so extra
candidates cost about what they could save; the chain is also the only shape HF's cache takes
without custom attention masks.

Fast path (Reflex, RECONSTRUCTION): each row carries ``δ ∈ R^H`` (reset per trajectory); after
a rejection of head j's draft ``x̂`` in favour of the target's token ``x*`` (known one iteration
later: delayed feedback), ``δ ← clip_{‖δ‖≤ε}(δ + η (W_j[x*] − W_j[x̂]))`` with ``W_j`` head j's
output embeddings. No gradient, no change to the heads.

Slow path (RECONSTRUCTION): each generate call is a window with acceptance ``a``; an EMA of
``a`` below ``slow_tau`` × the reference acceptance (the first window after the last fit) for
``slow_windows`` consecutive windows triggers a supervised fit of the heads on the policy's
hidden states over the most recent sequences. With ``bootstrap_fit`` the heads are also fit
once after the first window (fresh heads only echo the next-token guess).

Measured (``benchmarks/specroll.py``, 0.54 M testbed model, K = 3, 64 rows): ~35 % acceptance and
~1.9 tokens per target forward, yet 0.71× tokens/s on one CPU thread and 1.08× on an H200: at this
size a forward costs about its per-call overhead, and an iteration's extra work (heads, acceptance,
cache bookkeeping) costs as much as the forwards it saves. The gain needs a model whose forward
dominates the iteration.

The engine state (heads, buffer, EMA) lives in one :class:`SpecRoll` per policy object
(:func:`rlvr.rollout.engines.base.engine_for`), so it persists across RL steps with no change to the trainer.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from rlvr.registry import param, register
from rlvr.rollout.draft_heads import DraftHeads, fit_heads, output_layer_weight
from rlvr.rollout.engines import base
from rlvr.rollout.engines.base import DecodeRequest, Engine, cache_kwargs


@dataclass(frozen=True)
class SpecRollConfig:
    num_heads: int = param(3, "K: draft tokens proposed per target forward")
    draft_temperature: float = param(1.0, "drafts are sampled from softmax(head logits / (this × T)); any value "
                                          "keeps exactness, it only moves the acceptance rate")
    reflex: bool = param(True, "fast path: trajectory-local hidden-state corrections (Reflex)")
    reflex_eta: float | None = param(None, "eta: step of a Reflex correction per rejection (required with "
                                           "reflex, docs/methods.md §2.11)")
    reflex_eps: float | None = param(None, "epsilon: bound on the norm of a trajectory's correction delta "
                                           "(required with reflex)")
    slow_tau: float = param(0.6, "slow path: refit when the acceptance EMA is below this × the reference acceptance")
    slow_windows: int = param(3, "slow path: consecutive low windows (generate calls) before a refit")
    slow_ema: float = param(0.5, "slow path: EMA decay of the per-window acceptance")
    bootstrap_fit: bool = param(True, "fit the heads once after the first window (fresh heads echo the next token)")
    fit_steps: int = param(100, "Adam steps per head fit")
    fit_lr: float = param(3e-3, "Adam learning rate of a head fit")
    fit_batch: int = param(512, "positions per fit step (each trains all K heads)")
    buffer_rows: int = param(256, "most recent sequences kept for head fits")
    seed: int = param(0, "seed of the head initialisation and of the fit's minibatches")

    def __post_init__(self) -> None:
        if self.num_heads < 1 or self.slow_windows < 1 or self.buffer_rows < 1 or self.fit_steps < 0:
            raise ValueError("specroll: num_heads, slow_windows and buffer_rows must be >= 1, fit_steps >= 0")
        if self.reflex and (self.reflex_eta is None or self.reflex_eps is None):
            raise ValueError("specroll: reflex_eta and reflex_eps are required with reflex: true (docs/methods.md §2.11); "
                             "or set reflex: false")
        if (self.reflex_eps or 0) < 0 or (self.reflex_eta or 0) < 0 or self.draft_temperature <= 0:
            raise ValueError("specroll: reflex_eta and reflex_eps must be >= 0, draft_temperature > 0")
        if not 0.0 <= self.slow_ema < 1.0 or self.slow_tau < 0:
            raise ValueError(f"specroll: need 0 <= slow_ema < 1 and slow_tau >= 0, got {self.slow_ema}, "
                             f"{self.slow_tau}")


# --- the exact acceptance rule (pure tensor math) -------------------------------------------------

def verify_drafts(p: Tensor, q: Tensor, drafts: Tensor, uniforms: Tensor) -> tuple[Tensor, Tensor]:
    """Speculative-sampling verification of K drafts per row.

    ``p`` (B, K+1, V): the target's sampling distributions after each prefix ``c, d_1..d_j``;
    ``q`` (B, K, V): the distributions the drafts were drawn from; ``drafts`` (B, K);
    ``uniforms`` (B, K) in [0, 1). Returns ``n_accepted`` (B,), the number of leading drafts kept,
    and ``next_probs`` (B, V), the distribution of the token after them:
    ``norm(max(0, p_j − q_j))`` at the first rejection j, ``p_{K+1}`` when all were kept.
    """
    k = drafts.shape[1]
    p_d = p[:, :k].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)  # (B, K)
    q_d = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)  # (B, K), > 0: d was drawn from q
    accept = uniforms < (p_d / q_d).clamp(max=1.0)  # (B, K)
    n_accepted = accept.long().cumprod(-1).sum(-1)  # (B,) leading accepts
    rows = torch.arange(drafts.shape[0], device=drafts.device)
    at = n_accepted.clamp(max=k - 1)  # (B,) first rejected position (any, when none was)
    residual = (p[rows, at] - q[rows, at]).clamp(min=0.0)  # (B, V)
    mass = residual.sum(-1, keepdim=True)
    # p == q at the rejected position (a rejection of probability 0, reachable by rounding): use p
    residual = torch.where(mass > 0, residual / mass.clamp(min=1e-30), p[rows, at])
    next_probs = torch.where((n_accepted == k).unsqueeze(-1), p[:, k], residual)  # (B, V)
    return n_accepted, next_probs


def reflex_update(delta: Tensor, toward: Tensor, away: Tensor, eta: float, eps: float) -> Tensor:
    """``clip_{‖δ‖≤ε}(δ + η (toward − away))`` row by row: (B, H) → (B, H), never longer than ε."""
    new = delta + eta * (toward - away)  # (B, H)
    norm = new.norm(dim=-1, keepdim=True)
    return new * (eps / norm.clamp(min=1e-30)).clamp(max=1.0)


# --- the engine -------------------------------------------------------------------------------------

@register("engine", "specroll")
class SpecRoll(Engine):
    """Speculative rollout engine with future-token heads, Reflex and a slow path (SpecRoll).

    Paper: SpecRoll (adaptive speculative rollout for RL; docs/methods.md §2.11, paper abstract only);
    the acceptance rule is speculative sampling, Chen et al. (arXiv:2302.01318) and Leviathan et
    al. (arXiv:2211.17192); heads after Medusa (arXiv:2401.10774).

    Equation: accept draft x ~ q with probability ``min(1, p(x)/q(x))``, else sample
    ``norm(max(0, p − q))``; so ``P(token = v) = p(v)`` for any q.

    Differs from loop:
      * up to K+1 tokens per target forward instead of one; the distribution is unchanged;
      * no repetition penalty (a draft's distribution would depend on the drafts before it);
      * holds state across calls (heads, recent sequences, acceptance EMA), kept per policy;
      * may spend time fitting its heads (the slow path) inside a generate call.

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T); ``last_stats`` holds the call's
    ``rollout/spec_*`` metrics.
    """

    Config = SpecRollConfig
    paper = "Accelerating Large Language Model Decoding with Speculative Sampling (arXiv:2302.01318)"
    supports_repetition_penalty = False

    def __init__(self, config: SpecRollConfig | None = None) -> None:
        super().__init__(config)
        self.reset()

    def reset(self) -> None:
        """Forget the heads and every statistic (the next call starts from fresh heads)."""
        self.heads: DraftHeads | None = None
        self.buffer: deque[tuple[list[int], int]] = deque(maxlen=self.config.buffer_rows)  # (tokens, prompt length)
        self.ema: float | None = None
        self.reference: float | None = None  # acceptance of the first window after the last fit
        self.low_windows = 0
        self.fits = 0
        self.needs_bootstrap = self.config.bootstrap_fit
        self.last_stats: dict[str, float] = {}

    def decode(self, model: PreTrainedModel, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        """Tokens (N, T) and their target log-probs (N, T), T ≤ ``max_new_tokens``."""
        prompt_ids, prompt_mask, max_new_tokens = request.prompt_ids, request.prompt_mask, request.max_new_tokens
        sampler, pad_id, eos_ids = request.sampler, request.pad_id, request.eos_ids
        if sampler.penalised:
            raise ValueError("generate: repetition_penalty is not supported by the specroll engine")
        n, dev = prompt_ids.shape[0], prompt_ids.device
        tokens = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=dev)  # (N, T)
        logprobs = torch.zeros((n, max_new_tokens), dtype=torch.float32, device=dev)  # (N, T)
        lengths = torch.zeros(n, dtype=torch.long, device=dev)  # (N,) committed tokens per row
        counts = {"proposed": 0, "accepted": 0, "forwards": n, "delta_max": 0.0}
        if max_new_tokens > 0:
            state = _Rows.prefill(model, prompt_ids, prompt_mask, sampler, self._heads_for(model))
            while state is not None:
                state = self._iteration(model, state, sampler, tokens, logprobs, lengths, max_new_tokens,
                                        eos_ids, counts)
        steps = int(lengths.max()) if n else 0
        tokens, logprobs = tokens[:, :steps], logprobs[:, :steps]
        self._remember(prompt_ids, prompt_mask, tokens, eos_ids)
        self.last_stats = self._window(model, counts, int(lengths.sum()))
        return tokens, logprobs

    def _iteration(self, model: PreTrainedModel, s: "_Rows", sampler: Any, tokens: Tensor, logprobs: Tensor,
                   lengths: Tensor, max_new: int, eos_ids: Tensor, counts: dict) -> "_Rows | None":
        """Commit one target-sampled token, then draft, verify and commit the accepted drafts."""
        cfg, gen, heads = self.config, sampler.gen, self.heads
        c = torch.multinomial(s.probs, 1, generator=gen).squeeze(-1)  # (B,) exact sample
        lp = torch.log_softmax(s.logits / sampler.temperature, -1).gather(-1, c.unsqueeze(-1)).squeeze(-1)
        tokens[s.rows, lengths[s.rows]], logprobs[s.rows, lengths[s.rows]] = c, lp
        lengths[s.rows] += 1
        if cfg.reflex and s.pending_head is not None:  # delayed feedback: the rejected draft vs the target's token
            s.reflex(heads, c, cfg.reflex_eta, cfg.reflex_eps)
            counts["delta_max"] = max(counts["delta_max"], float(s.delta.norm(dim=-1).max()))
        remaining = max_new - lengths[s.rows]  # (B,)
        alive = ~(torch.isin(c, eos_ids) | (remaining <= 0))  # (B,)
        c, s = c[alive], s.select(alive)
        if s is None:
            return None
        remaining = max_new - lengths[s.rows]
        k = min(cfg.num_heads, int(remaining.max()))
        draft_logits = heads(s.hidden + s.delta)[:, :k]  # (B, k, V)
        q = sampler.probs(draft_logits / cfg.draft_temperature)  # (B, k, V)
        drafts = torch.multinomial(q.reshape(-1, q.shape[-1]), 1, generator=gen).view(q.shape[:2])  # (B, k)
        logits, hidden = s.forward(model, torch.cat([c.unsqueeze(-1), drafts], dim=1))  # (B, k+1, V), (B, k+1, H)
        p = sampler.probs(logits)  # (B, k+1, V)
        u = torch.rand(drafts.shape, generator=gen, device=drafts.device)  # (B, k)
        accepted, next_probs = verify_drafts(p, q, drafts, u)
        counts["proposed"] += drafts.numel()
        counts["accepted"] += int(accepted.sum())
        counts["forwards"] += drafts.shape[0]
        # commit the accepted drafts (those past the length cap are dropped: they would be cut anyway)
        j = torch.arange(k, device=drafts.device)
        is_eos = torch.isin(drafts, eos_ids).long()
        take = (j < accepted.unsqueeze(-1)) & (j < remaining.unsqueeze(-1))  # (B, k)
        take &= (is_eos.cumsum(-1) - is_eos) == 0  # nothing after an accepted eos
        draft_lp = torch.log_softmax(logits[:, :k] / sampler.temperature, -1).gather(-1, drafts.unsqueeze(-1))
        row_idx = s.rows.unsqueeze(-1).expand_as(drafts)[take]
        col_idx = (lengths[s.rows].unsqueeze(-1) + j)[take]
        tokens[row_idx, col_idx], logprobs[row_idx, col_idx] = drafts[take], draft_lp.squeeze(-1)[take]
        lengths[s.rows] += take.sum(-1)
        ended = (is_eos.bool() & take).any(-1) | (lengths[s.rows] >= max_new)  # (B,)
        s.advance(logits, hidden, next_probs, accepted, drafts)
        return s.select(~ended)

    # --- state across calls ---------------------------------------------------------------------

    def _heads_for(self, model: PreTrainedModel) -> DraftHeads:
        weight = output_layer_weight(model)
        hidden, vocab = model.config.hidden_size, int(model.config.vocab_size)
        if self.heads is None or self.heads.out_weight.shape[1:] != (vocab, hidden):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.config.seed)
                self.heads = DraftHeads(hidden, vocab, self.config.num_heads, weight)
            self.heads.to(next(model.parameters()).device)
        return self.heads

    def _remember(self, prompt_ids: Tensor, prompt_mask: Tensor, tokens: Tensor, eos_ids: Tensor) -> None:
        """Keep the call's sequences (prompt ⊕ completion through the first eos) for head fits."""
        is_eos = torch.isin(tokens, eos_ids).long()
        keep = (is_eos.cumsum(-1) - is_eos) == 0  # (N, T) through the first eos
        for ids, pm, tok, km in zip(prompt_ids.tolist(), prompt_mask.tolist(), tokens.tolist(), keep.tolist()):
            prompt = [t for t, m in zip(ids, pm) if m]
            self.buffer.append((prompt + [t for t, m in zip(tok, km) if m], len(prompt)))

    def _window(self, model: PreTrainedModel, counts: dict, n_tokens: int) -> dict[str, float]:
        """Close the window: acceptance statistics and the slow path's decision."""
        cfg = self.config
        rate = counts["accepted"] / counts["proposed"] if counts["proposed"] else 0.0
        refit = self.needs_bootstrap
        if counts["proposed"] and not refit:
            self.ema = rate if self.ema is None else cfg.slow_ema * self.ema + (1 - cfg.slow_ema) * rate
            if self.reference is None:
                self.reference = rate
            self.low_windows = self.low_windows + 1 if self.ema < cfg.slow_tau * self.reference else 0
            refit = self.low_windows >= cfg.slow_windows
        seconds = self.refit(model) if refit else 0.0
        return {"rollout/spec_accept_rate": rate,
                "rollout/spec_tokens_per_forward": n_tokens / counts["forwards"] if counts["forwards"] else 0.0,
                "rollout/spec_accept_ema": self.ema if self.ema is not None else rate,
                "rollout/spec_head_updates": float(refit), "rollout/spec_head_update_s": seconds,
                "rollout/spec_delta_norm_max": counts["delta_max"]}

    @torch.no_grad()
    def refit(self, model: PreTrainedModel, chunk: int = 64) -> float:
        """The slow path: fit the heads on the policy's hidden states over the buffer; returns seconds."""
        start = time.perf_counter()
        cfg, heads = self.config, self._heads_for(model)
        dev = next(model.parameters()).device
        rows = list(self.buffer)
        width = max((len(t) for t, _ in rows), default=0)
        if width < 3:
            return 0.0
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        real = torch.zeros((len(rows), width), dtype=torch.bool)
        target = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, (tok, plen) in enumerate(rows):
            ids[i, :len(tok)] = torch.tensor(tok, dtype=torch.long)
            real[i, :len(tok)] = True
            target[i, plen:len(tok)] = True  # completion tokens are the targets
        ids, real, target = ids.to(dev), real.to(dev), target.to(dev)
        hidden = torch.cat([_last_hidden(model, ids[i:i + chunk], real[i:i + chunk])
                            for i in range(0, len(rows), chunk)])  # (N, S, H)
        fit_heads(heads, hidden, ids, target, steps=cfg.fit_steps, lr=cfg.fit_lr, batch_positions=cfg.fit_batch,
                  seed=cfg.seed + self.fits)
        self.fits += 1
        self.needs_bootstrap, self.reference, self.ema, self.low_windows = False, None, None, 0
        return time.perf_counter() - start


def _last_hidden(model: PreTrainedModel, ids: Tensor, real: Tensor) -> Tensor:
    """(N, S, H) float32 last hidden state (the input of the output layer), right-padded rows."""
    pos = (real.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=real.long(), position_ids=pos, output_hidden_states=True,
                logits_to_keep=1)
    return out.hidden_states[-1].float()


class _Rows:
    """The unfinished rows of a SpecRoll decode: cache, masks and per-row speculative state."""

    def __init__(self, rows: Tensor, cache: DynamicCache, attn: Tensor, next_pos: Tensor, logits: Tensor,
                 hidden: Tensor, probs: Tensor) -> None:
        self.rows, self.cache, self.attn, self.next_pos = rows, cache, attn, next_pos  # (B,), -, (B, S), (B,)
        self.logits, self.hidden, self.probs = logits, hidden, probs  # (B, V), (B, H), (B, V) next-token state
        self.delta = torch.zeros_like(hidden)  # (B, H) Reflex correction
        self.pending_head: Tensor | None = None  # (B,) head index of the last rejected draft, -1 if none
        self.pending_draft: Tensor | None = None  # (B,) the rejected draft token

    @classmethod
    def prefill(cls, model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, sampler: Any,
                heads: DraftHeads) -> "_Rows":
        attn = prompt_mask.long()  # (B, P)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=model.config)
        out = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, use_cache=True,
                    **cache_kwargs(model, cache),
                    logits_to_keep=1, output_hidden_states=True)
        logits = out.logits[:, -1].float()  # (B, V)
        rows = torch.arange(prompt_ids.shape[0], device=prompt_ids.device)
        return cls(rows, cache, attn, pos[:, -1] + 1, logits, out.hidden_states[-1][:, -1].float(),
                   sampler.probs(logits))

    def forward(self, model: PreTrainedModel, inputs: Tensor) -> tuple[Tensor, Tensor]:
        """Target forward over ``inputs`` (B, k+1) appended to the cache: logits, last hidden states."""
        width = inputs.shape[1]
        self.attn = torch.cat([self.attn, torch.ones_like(self.attn[:, :width])], dim=-1)
        pos = self.next_pos.unsqueeze(-1) + torch.arange(width, device=inputs.device)  # (B, k+1)
        out = model(input_ids=inputs, attention_mask=self.attn, position_ids=pos, use_cache=True,
                    **cache_kwargs(model, self.cache),
                    output_hidden_states=True)
        return out.logits.float(), out.hidden_states[-1].float()

    def advance(self, logits: Tensor, hidden: Tensor, next_probs: Tensor, accepted: Tensor, drafts: Tensor) -> None:
        """After verification: mask the rejected drafts' cache slots, move to the last kept position."""
        k = drafts.shape[1]
        rows = torch.arange(drafts.shape[0], device=drafts.device)
        self.attn[:, -k:] = (torch.arange(k, device=drafts.device) < accepted.unsqueeze(-1)).long()
        self.next_pos = self.next_pos + accepted + 1
        self.logits, self.hidden, self.probs = logits[rows, accepted], hidden[rows, accepted], next_probs
        rejected = accepted < k
        self.pending_head = torch.where(rejected, accepted, torch.full_like(accepted, -1))
        self.pending_draft = drafts[rows, accepted.clamp(max=k - 1)]

    def reflex(self, heads: DraftHeads, target_tokens: Tensor, eta: float, eps: float) -> None:
        """Reflex on rows whose last draft was rejected: δ moves toward the target token's embedding."""
        hit = self.pending_head >= 0  # (B,)
        if bool(hit.any()):
            head = self.pending_head[hit]
            toward = heads.token_embeddings(head, target_tokens[hit]).detach()
            away = heads.token_embeddings(head, self.pending_draft[hit]).detach()
            self.delta[hit] = reflex_update(self.delta[hit], toward, away, eta, eps)
        self.pending_head = None

    def select(self, keep: Tensor) -> "_Rows | None":
        """Drop finished rows (and their cache); None when none is left."""
        if bool(keep.all()):
            return self
        if not bool(keep.any()):
            return None
        idx = keep.nonzero().squeeze(-1)
        self.cache.batch_select_indices(idx)
        self.rows, self.attn, self.next_pos = self.rows[idx], self.attn[idx], self.next_pos[idx]
        self.logits, self.hidden, self.probs = self.logits[idx], self.hidden[idx], self.probs[idx]
        self.delta = self.delta[idx]
        if self.pending_head is not None:
            self.pending_head, self.pending_draft = self.pending_head[idx], self.pending_draft[idx]
        return self


# --- one engine per policy ------------------------------------------------------------------------

def engine_for(model: torch.nn.Module, params: dict | None = None) -> SpecRoll:
    """The SpecRoll engine of ``model`` (created on first use, rebuilt if ``params`` change): its
    heads and statistics persist across calls for as long as the policy object lives."""
    return base.engine_for(model, "specroll", params)  # type: ignore[return-value]
