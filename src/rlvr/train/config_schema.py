"""The run configuration's schema: one frozen dataclass per section (``model``, ``task``, ``warm_start``,
``rollout``, ``algorithm``, ``optim``, ``critic``, ``run``), each field with its default and help line,
each section checking its own values.

YAML files and ``key.sub=value`` overrides are mapped onto it by ``rlvr.train.config`` (``load_config``,
which also gives these names), where unknown keys are errors naming the key and the valid ones; plug-in
parameters are checked against the plug-in's own ``Config`` when the run is built (``validate``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.aggregation import Aggregation
from rlvr.models.lora_spec import LoraSpec
from rlvr.models.recompute import RECOMPUTE
from rlvr.registry import param
from rlvr.train.ranges import check_ranges


class ConfigError(ValueError):
    """A configuration file or override is invalid."""


@dataclass(frozen=True)
class PluginSpec:
    """A registered plug-in by name (or ``"pkg.module:Object"``) plus its hyperparameters."""

    name: str = param("", "registered name or 'pkg.module:Object'")
    params: dict = param({}, "hyperparameters of the plug-in's Config")

    def plugin_class(self, kind: str) -> type:
        """The class registered as ``name`` among the plug-ins of ``kind``, whose class traits the run
        reads; an unknown name is a ConfigError listing the valid ones."""
        from rlvr.registry import RegistryError, get
        try:
            return get(kind, self.name)
        except RegistryError as err:
            raise ConfigError(str(err)) from None


MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION = ("sdpa", "eager", "flash_attention_2")
MIXED_PRECISION = ("no", "bf16", "fp16")


@dataclass(frozen=True)
class ModelConfig:
    path: str | None = param(None, "a local Hugging Face checkpoint; None builds the tiny testbed model")
    hidden: int = param(128, "tiny model: hidden size")
    layers: int = param(2, "tiny model: decoder layers")
    heads: int = param(4, "tiny model: attention heads")
    dtype: str = param("auto", "parameter dtype at load: float32 | bfloat16 | float16 | auto (the checkpoint's "
                               "own, but float32 master weights for a half-precision checkpoint trained without "
                               "LoRA; float32 for the tiny model; float32 under run.mixed_precision)")
    attn_implementation: str = param("sdpa", "attention kernel: sdpa | eager | flash_attention_2 (when installed)")
    gradient_checkpointing: bool = param(False, "recompute each decoder layer's activations in the backward pass "
                                                "(less memory, more compute; model.recompute says how much); off "
                                                "during generation")
    recompute: str = param("all", "what gradient checkpointing recomputes: all (every op of a layer; least memory, "
                                  "~30% more update compute) | elementwise (norms, RoPE, activations, casts; matmul "
                                  "and attention outputs kept: ~40% of a layer's activation memory, ~10% more "
                                  "compute); both give the same gradients, bit for bit")
    lora: LoraSpec | None = param(None, "LoRA adapter {r, alpha, dropout, target_modules} through peft; the "
                                        "reference is the base with the adapter off; None or {} = full fine-tune")

    def __post_init__(self) -> None:
        checks = {"dtype": (self.dtype, MODEL_DTYPES), "attn_implementation": (self.attn_implementation, ATTENTION),
                  "recompute": (self.recompute, RECOMPUTE)}
        for name, (value, valid) in checks.items():
            if value not in valid:
                raise ValueError(f"model.{name} must be one of {' | '.join(valid)}, got '{value}'")
        if self.recompute != "all" and not self.gradient_checkpointing:
            raise ValueError(f"model.recompute={self.recompute} says what gradient checkpointing recomputes, but "
                             f"model.gradient_checkpointing is false; set it to true (or drop model.recompute)")


@dataclass(frozen=True)
class TaskConfig:
    name: str = param("arithmetic", "registered task (rlvr list) or 'pkg.module:Object'")
    params: dict = param({}, "the task's hyperparameters")


@dataclass(frozen=True)
class WarmStartConfig:
    steps: int = param(400, "supervised steps on task demonstrations before RL (0 = none); the "
                            "minimum when target_accuracy is set")
    target_accuracy: float = param(0.0, "keep training past `steps` until greedy accuracy on validation "
                                        "problems (train split) reaches this (0 = off)")
    max_steps: int = param(1000, "upper bound on supervised steps when target_accuracy is set")
    check_every: int = param(50, "steps between validation checks when target_accuracy is set")
    batch_size: int = param(64, "demonstrations per supervised step")
    lr: float = param(3e-3, "supervised AdamW learning rate")
    warmup: int = param(30, "supervised linear warm-up steps")
    demo_suffix: str = param("", "text appended to every demonstration; '{confidence}' becomes a value drawn "
                                 "uniformly from 0.1, 0.2, ..., 0.9 (teaches C3RL's answer + confidence format, "
                                 "not calibration: RL does that)")


@dataclass(frozen=True)
class AsyncConfig:
    """``rollout.async_rollout``: generation in a worker process, ahead of training (rlvr.train.async_collect)."""

    max_staleness: int = param(0, "k: a row may be trained on by a policy at most k versions newer than the one "
                                  "that generated it; the generator runs up to k steps ahead (0 = today's "
                                  "in-process loop, bit-identical)")
    weight_sync_steps: int = param(1, "push the trainer's weights to the generator every this many steps (a "
                                      "batch that comes back older than k versions is dropped, counted in "
                                      "async/dropped_rows, and regenerated after a forced sync)")
    generator_threads: int = param(1, "torch intra-op threads of the generator process")
    timeout_s: float = param(300.0, "seconds to wait for one batch or one weight sync before the run stops "
                                    "with an error (the generator died or hangs)")
    bucket_mb: float = param(64.0, "largest weight bucket per broadcast of a sync, in MB")
    in_worker: bool = param(False, "with max_staleness 0: generate in the worker process anyway, one step at a "
                                   "time (the two-process synchronous baseline of benchmarks/async_speed.py)")
    port: int = param(0, "TCP port of the weight-sync store on 127.0.0.1 (0 = a free one)")

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.weight_sync_steps < 1 or self.generator_threads < 1:
            raise ValueError(f"rollout.async_rollout: need max_staleness >= 0, weight_sync_steps >= 1 and "
                             f"generator_threads >= 1, got {self.max_staleness}, {self.weight_sync_steps}, "
                             f"{self.generator_threads}")
        if self.timeout_s <= 0 or self.bucket_mb <= 0:
            raise ValueError(f"rollout.async_rollout: need timeout_s > 0 and bucket_mb > 0, got "
                             f"{self.timeout_s}, {self.bucket_mb}")

    @property
    def enabled(self) -> bool:
        """A generator worker process is used (k >= 1, or the synchronous two-process baseline)."""
        return self.max_staleness > 0 or self.in_worker


@dataclass(frozen=True)
class RolloutConfig:
    sampler: PluginSpec = param(PluginSpec("plain"), "rollout strategy (rlvr list sampler): plain, prefix, "
                                                     "hint, anchor")
    prompts_per_step: int = param(8, "prompts B per optimizer step (global, across ranks)")
    group_size: int = param(8, "completions G per prompt")
    batch_size: int = param(0, "rows B*G per step, TRL-style; when set, prompts_per_step = batch_size / group_size")
    max_new_tokens: int = param(48, "completion length cap T")
    temperature: float = param(1.0, "sampling temperature")
    top_p: float = param(1.0, "nucleus sampling mass")
    top_k: int = param(0, "top-k sampling (0 = off)")
    min_p: float = param(0.0, "min-p sampling: drop tokens below min_p x the top token's probability (0 = off)")
    repetition_penalty: float = param(1.0, "HF repetition penalty on tokens already in the prompt or completion "
                                           "(1 = off; loop, hf, vllm)")
    micro_batch_size: int = param(0, "rows per generation and no-grad scoring forward (0 = the whole local batch)")
    refill_rounds: int = param(0, "DAPO dynamic sampling: extra sampling rounds to refill groups the filters drop")
    verify_timeout_s: float = param(5.0, "time limit of one verifier call; a timeout scores 0")
    verify_workers: int = param(-1, "verifier pool processes scoring a batch in parallel (-1 = one per CPU "
                                    "core; 0 = verify in-process, one call at a time); tasks with bounded "
                                    "checks (needs_timeout = False) always verify in-process")
    verify_memory_mb: int = param(4096, "address space (MiB) each verifier pool worker may add beyond its size at "
                                        "start (RLIMIT_AS): a call past it scores 0 with the reason and the pool "
                                        "carries on; 0 = no limit (needed by reward functions that use CUDA, "
                                        "which reserves far more address space)")
    engine: PluginSpec = param(PluginSpec("loop"), "generation engine and its options (rlvr list --kind engine): "
                                                   "loop | hf | specroll | vllm | vllm_server | "
                                                   "'pkg.module:MyEngine', e.g. {name: specroll, num_heads: 3}")
    engine_params: dict = param({}, "deprecated spelling of the engine's options beside a bare engine name; "
                                    "they are moved into rollout.engine (empty once the config is built)")
    async_rollout: AsyncConfig = param(AsyncConfig(), "asynchronous generation with bounded staleness (YAML key "
                                                      "rollout.async_rollout; `async` is a Python keyword)")

    def __post_init__(self) -> None:
        if self.engine_params:
            object.__setattr__(self, "engine", _fold_engine_params(self.engine, self.engine_params))
            object.__setattr__(self, "engine_params", {})
        from rlvr.rollout.engines.base import check_engine  # lazy: the config module stays free of torch at import
        check_engine(self.engine.name, self.engine.params, self.repetition_penalty)
        if self.group_size < 1 or self.prompts_per_step < 1:
            raise ValueError(f"rollout.group_size and rollout.prompts_per_step must be >= 1, "
                             f"got {self.group_size}, {self.prompts_per_step}")
        if self.batch_size:
            if self.batch_size % self.group_size:
                raise ValueError(f"rollout.batch_size={self.batch_size} is not divisible by "
                                 f"rollout.group_size={self.group_size}")
            object.__setattr__(self, "prompts_per_step", self.batch_size // self.group_size)
        if self.verify_workers < -1:
            raise ValueError(f"rollout.verify_workers must be -1 (one per core), 0 (in-process) or a "
                             f"count, got {self.verify_workers}")
        if self.verify_memory_mb < 0:
            raise ValueError(f"rollout.verify_memory_mb must be >= 0 (0 = no limit), got {self.verify_memory_mb}")


def _fold_engine_params(engine: PluginSpec, params: dict) -> PluginSpec:
    """The old spelling (``engine: specroll`` + ``engine_params: {num_heads: 3}``) as one spec, with a
    deprecation notice; an option given both ways with two values is an error naming it."""
    clash = sorted(k for k in set(params) & set(engine.params) if params[k] != engine.params[k])
    if clash:
        raise ValueError(f"rollout.engine_params.{clash[0]}={params[clash[0]]!r} and rollout.engine.{clash[0]}="
                         f"{engine.params[clash[0]]!r}: set the engine's options in rollout.engine only")
    from rlvr.notice import notice
    notice(f"rollout.engine_params is deprecated: write the options inside rollout.engine, as "
           f"engine: {{name: {engine.name}, {', '.join(f'{k}: {v}' for k, v in params.items())}}}")
    return PluginSpec(engine.name, {**engine.params, **params})


@dataclass(frozen=True)
class AlgorithmConfig:
    advantage: PluginSpec = param(PluginSpec("grpo"), "advantage estimator")
    loss: PluginSpec = param(PluginSpec("ppo_clip"), "per-token policy loss")
    aggregation: Aggregation = param(Aggregation(), "how the per-token loss becomes a scalar")
    shapers: list = param([], "reward shapers, applied in order (list of {name, params})")
    filters: list = param([], "batch filters, applied in order (list of {name, params})")
    weightings: list = param([], "token weightings (reweight stage), applied in order (list of {name, params})")
    reward_weights: list[float] = param([], "weights of the reward objectives [correct, *task objectives]; "
                                     "empty = the first objective alone (reward functions add their own)")
    rewards: list[dict] = param([], "TRL-style reward functions, each an objective beside the verdict: list of "
                              "{fn: 'pkg.module:func', weight: 1.0, name: optional} (rlvr.rewards.functions)")
    selector: PluginSpec = param(PluginSpec("uniform"), "prompt selector (rlvr list selector): uniform, "
                                                        "curriculum (CVPO)")
    teacher: PluginSpec = param(PluginSpec("oracle"), "first-mistake teacher for estimators that need one "
                                                      "(cliff): 'oracle' (the task's step checker) or 'llm'")
    kl_coef: float = param(0.0, "KL penalty coefficient in the loss (needs a reference model)")
    kl_estimator: str = param("k3", "k1 | k2 | k3 | abs")
    entropy_coef: float = param(0.0, "entropy bonus coefficient")
    mask_truncated_completions: bool = param(False, "exclude completions cut by rollout.max_new_tokens (no eos) "
                                                    "from the loss, as DAPO and TRL do; their rewards still "
                                                    "count in group baselines")


FORMER_GRADIENT_NAME = "adamw"  # optim.name of the gradient trainer before rlvr.loops


@dataclass(frozen=True)
class OptimConfig:
    name: str = param("gradient", "the training loop, a registered loop plug-in (rlvr list --kind loop): "
                                  "'gradient' (the gradient trainer; 'adamw', its former name, reads as it) or "
                                  "one with its own loop (e.g. es)")
    params: dict = param({}, "hyperparameters of the loop plug-in named by `name`")
    optimizer: str = param("adamw", "the torch optimizer of the gradient steps, a registered optimizer plug-in "
                                    "(rlvr list --kind optimizer)")
    optimizer_params: dict = param({}, "hyperparameters of the torch optimizer's own Config (beyond lr, betas, "
                                       "weight_decay)")
    lr: float = param(1e-4, "learning rate (0: a frozen control run; everything runs, nothing is updated)")
    betas: tuple = param((0.9, 0.999), "the optimizer's betas (AdamW's)")
    weight_decay: float = param(0.0, "decoupled weight decay")
    grad_clip: float = param(1.0, "max global gradient norm (0 = off)")
    schedule: str = param("constant", "constant | linear | cosine (after warm-up)")
    warmup_steps: int = param(0, "linear learning-rate warm-up (optimizer steps: ppo_epochs x mini_batches a step)")
    ppo_epochs: int = param(1, "passes over each batch")
    mini_batches: int = param(1, "optimizer steps per batch and epoch, each on every M-th row of the local "
                                 "batch (verl ppo_mini_batch_size = rows / M); behaviour log-probs come from "
                                 "before the first")
    old_logprobs: str = param("recompute", "behaviour log-probs of the ratio: recompute (the policy before the "
                                           "first step) | rollout (the sampler's; bypass mode, no extra pass)")
    micro_batch_size: int = param(0, "rows per forward/backward (0 = the whole local batch)")
    skip_zero_rows: bool = param(True, "leave rows whose advantage is 0 on every trained token out of the "
                                       "update's forward/backward (exact: they add no gradient; the "
                                       "normalisers still count them); off by itself when the objective "
                                       "(KL, entropy bonus), a weighting or a critic needs every row")
    trim_padding: bool = param(True, "sort rows by length into micro-batches and cut each forward to its own "
                                     "longest prompt and completion (exact up to float rounding), in the "
                                     "update and in the no-grad scoring passes")
    length_buckets: int = param(3, "with trim_padding and one padded micro-batch (micro_batch_size 0, not "
                                   "packed): split the update's rows, sorted by length, into up to this many "
                                   "micro-batches of at least 8 rows, each cut to its own longest row (exact up "
                                   "to float rounding; fewer padded positions for a forward/backward more "
                                   "each; 1 = off)")
    packing: str = param("auto", "padding-free passes: each micro-batch's rows in one sequence, positions "
                                 "restarting per row, attention kept within rows (exact up to float "
                                 "rounding). auto = where the model takes packed rows and its attention "
                                 "computes each row alone: flash_attention_2/3, and sdpa, which runs row "
                                 "by row in packed passes (rlvr.models.rowwise_attention); eager would "
                                 "compute a pack's whole L x L score matrix, so auto leaves it padded; "
                                 "always = pack with eager too (an error where the model cannot); "
                                 "never = padded (and sdpa stays transformers' own)")
    max_tokens_per_micro_batch: int = param(0, "token budget of each update micro-batch (0 = micro-batches by "
                                               "rows: micro_batch_size, length_buckets): rows longest first; "
                                               "packed, as many rows as their tokens fit; padded, as many as "
                                               "rows x the longest fit; a longer row gets one of its own")
    max_tokens_per_scoring_pass: int = param(0, "the same token budget for each no-grad scoring forward "
                                                "(reference, behaviour/old log-probs, entropy); 0 = forwards "
                                                "by rows (rollout.micro_batch_size)")

    def __post_init__(self) -> None:
        # 'adamw' named the gradient trainer until the loops became a kind of their own (issue 50): saved
        # run configs and user files keep reading as before; the torch optimizer is optim.optimizer
        if self.name == FORMER_GRADIENT_NAME:
            object.__setattr__(self, "name", "gradient")
        if self.packing not in ("auto", "always", "never"):
            raise ValueError(f"optim.packing must be auto | always | never, got '{self.packing}'")
        if self.max_tokens_per_micro_batch < 0 or self.max_tokens_per_scoring_pass < 0:
            raise ValueError(f"optim.max_tokens_per_micro_batch and optim.max_tokens_per_scoring_pass must be "
                             f">= 0, got {self.max_tokens_per_micro_batch}, {self.max_tokens_per_scoring_pass}")
        if self.length_buckets < 1:
            raise ValueError(f"optim.length_buckets must be >= 1, got {self.length_buckets}")
        if self.mini_batches < 1 or self.ppo_epochs < 1:
            raise ValueError(f"optim.mini_batches and optim.ppo_epochs must be >= 1, got {self.mini_batches}, "
                             f"{self.ppo_epochs}")
        if self.old_logprobs not in ("recompute", "rollout"):
            raise ValueError(f"optim.old_logprobs must be recompute | rollout, got '{self.old_logprobs}'")

    def plugin_class(self) -> type:
        """The loop plug-in class registered as ``name`` (``rlvr.train.loop_plugin.LoopPlugin``), which
        the run asks what its loop takes; an unknown name is a ConfigError listing the valid ones."""
        from rlvr.train.loop_plugin import loop_class
        from rlvr.registry import RegistryError
        try:
            return loop_class(self.name)
        except RegistryError as err:
            raise ConfigError(f"optim.name: {err}") from None


@dataclass(frozen=True)
class CriticConfig:
    enabled: bool = param(False, "train a learned value model; advantages read its values (gae, la_gae, "
                                 "tether, cvpo need it)")
    init: str = param("policy", "'policy': a value head on a copy of the policy backbone; 'path': a separate "
                                "Hugging Face model at `path` with a scalar head")
    path: str | None = param(None, "local Hugging Face checkpoint of the critic when init = 'path'")
    template: str = param("{prompt}", "the critic's prompt: '{prompt}' = the policy's own view; any other "
                                      "format over {prompt}, {answer}, {solution} is a privileged view the "
                                      "policy never sees (PVF, BPCO+Ans/+Sol)")
    lr: float = param(5e-6, "critic AdamW learning rate (BPCO scripts: 5e-6, actor 1e-6)")
    betas: tuple = param((0.9, 0.999), "critic AdamW betas")
    weight_decay: float = param(0.0, "critic AdamW weight decay")
    grad_clip: float = param(1.0, "max critic gradient norm (0 = off)")
    schedule: str = param("constant", "critic lr schedule: constant | linear | cosine")
    lr_warmup_steps: int = param(0, "linear critic learning-rate warm-up (optimizer steps)")
    warmup_steps: int = param(0, "first RL steps in which only the critic trains (BPCO critic_warmup: 15)")
    epochs: int = param(1, "critic passes over each batch")
    micro_batch_size: int = param(0, "rows per critic forward/backward (0 = the whole local batch)")
    value_clip: float = param(0.5, "clip of the value loss: |V - V_old| <= this (verl cliprange_value 0.5)")
    loss_agg: str = param("token-mean", "aggregation of the value loss (verl default token-mean)")
    bound: str = param("none", "bound on value predictions: none | sigmoid (V = lo + (hi-lo)*sigmoid(v)) | "
                               "clamp (GAE reads clamp(v, lo, hi)); BPCO's bounding is a RECONSTRUCTION")
    reward_range: tuple = param((0.0, 1.0), "(lo, hi) the reward range the bound maps to")

    def __post_init__(self) -> None:
        checks = {"init": (self.init, ("policy", "path")), "bound": (self.bound, ("none", "sigmoid", "clamp")),
                  "schedule": (self.schedule, ("constant", "linear", "cosine"))}
        for name, (value, valid) in checks.items():
            if value not in valid:
                raise ValueError(f"critic.{name} must be one of {valid}, got '{value}'")
        if self.init == "path" and not self.path:
            raise ValueError("critic.init = 'path' needs critic.path (a local Hugging Face checkpoint)")
        if len(self.reward_range) != 2 or not self.reward_range[0] < self.reward_range[1]:
            raise ValueError(f"critic.reward_range must be (lo, hi) with lo < hi, got {self.reward_range}")


@dataclass(frozen=True)
class RunConfig:
    steps: int = param(200, "RL optimizer steps (the budget, unless a rollout or time budget ends the run first)")
    max_rollouts: int = param(0, "a hard cap on the completions generated (all ranks; refills, discarded "
                                 "or replaced rows, counterfactuals, weak-model drafts, MCMC proposals and "
                                 "ES populations included: rollout/generated_completions): no step or "
                                 "refill round starts that would pass it; 0 = no limit")
    max_seconds: float = param(0.0, "stop once RL training has run this long (wall-clock); 0 = no limit")
    seed: int = param(0, "one seed drives data order, sampling and initialisation (and the warm start)")
    rl_seed: int | None = param(None, "seed of the RL loop alone (data order, sampling, adapter init, ES "
                                      "noise); None = run.seed. The warm start, the model's initialisation "
                                      "and the held-out problems stay on run.seed")
    out_dir: str = param("runs/train", "run folder")
    eval_every: int = param(50, "held-out evaluation period in steps (0 = only at the end)")
    eval_problems: int = param(200, "held-out problems per evaluation")
    eval_k: int = param(8, "k of pass@k and maj@k in the final evaluation (0 = greedy accuracy only)")
    save_every: int = param(50, "checkpoint period in steps (0 = only at the end)")
    log_samples: int = param(4, "sample completions written per logging step")
    threads: int = param(0, "torch intra-op threads per process (0 = leave as is)")
    callbacks: list = param([], "callbacks called after each step, evaluation and save (rlvr.train.callbacks): "
                                "'pkg.module:Object' or {name: 'pkg.module:Class', params: {...}} (keyword "
                                "arguments of the class)")
    overwrite: bool = param(False, "start a fresh run even when out_dir holds one (it is archived next to it "
                                   "as <out_dir>.archived-<time>, never deleted); CLI: --overwrite")
    mixed_precision: str = param("no", "no | bf16 | fp16: autocast the policy's forward passes, float32 master "
                                       "weights and optimizer state (fp16 adds a gradient scaler)")
    report_to: list[str] = param([], "experiment trackers besides metrics.jsonl: none | tensorboard | wandb | "
                                "trackio | mlflow (a list)")
    table_every: int = param(10, "steps between completions tables (prompt, completion, reward, advantage) "
                                 "for trackers with tables (0 = never)")

    def __post_init__(self) -> None:
        bad = [c.name for c in self.callbacks if c.name.count(":") != 1]
        if bad:
            raise ConfigError(f"run.callbacks: expected 'pkg.module:Object' names, got {bad}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ValueError(f"run.mixed_precision must be one of {' | '.join(MIXED_PRECISION)}, "
                             f"got '{self.mixed_precision}'")
        from rlvr.train.trackers import check_report_to  # names known, packages installed
        object.__setattr__(self, "report_to", list(check_report_to(self.report_to)))

    @property
    def training_seed(self) -> int:
        """The RL loop's seed: ``rl_seed`` where set, else ``seed`` (one seed for everything, as before)."""
        return self.seed if self.rl_seed is None else self.rl_seed


@dataclass(frozen=True)
class SandboxConfig:
    require: str = param("auto", "isolation layers every model-written program must run behind, else the run "
                                 "does not start: auto (every layer this machine holds; `rlvr doctor` lists them) "
                                 "| none | a comma list of namespaces, root, seccomp, network")

    def __post_init__(self) -> None:
        from rlvr.sandbox.isolation import parse
        parse(self.require)  # ValueError naming what is wrong


@dataclass(frozen=True)
class Config:
    model: ModelConfig = param(ModelConfig(), "policy model")
    task: TaskConfig = param(TaskConfig(), "verifiable task")
    warm_start: WarmStartConfig = param(WarmStartConfig(), "supervised warm start")
    rollout: RolloutConfig = param(RolloutConfig(), "sampling")
    algorithm: AlgorithmConfig = param(AlgorithmConfig(), "RL method: plug-ins and knobs")
    optim: OptimConfig = param(OptimConfig(), "optimizer")
    critic: CriticConfig = param(CriticConfig(), "learned value model (critic)")
    run: RunConfig = param(RunConfig(), "run length, seed, logging")
    sandbox: SandboxConfig = param(SandboxConfig(), "isolation of model-written code (the code verifier, tools)")

    def __post_init__(self) -> None:
        check_ranges(self)  # numeric ranges: one line naming the key
        if self.model.lora is not None and not self.optim.plugin_class().takes_lora:
            raise ValueError(f"model.lora: loop '{self.optim.name}' runs its own training loop on the full "
                             f"weights and does not take a LoRA policy; remove model.lora or use optim.name=gradient")
        if self.rollout.async_rollout.enabled:
            from rlvr.train.async_check import check_async  # the rules live beside the async collector
            check_async(self)


__all__ = ["AlgorithmConfig", "AsyncConfig", "Config", "ConfigError", "CriticConfig", "ModelConfig", "OptimConfig",
           "PluginSpec", "RolloutConfig", "RunConfig", "TaskConfig", "WarmStartConfig"]
