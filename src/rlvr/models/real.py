"""Real-architecture example models with nothing downloaded: a BPE tokenizer trained locally with
``tokenizers`` (byte-level, with a ChatML chat template, as Qwen2 checkpoints ship) and a randomly
initialised Qwen2- or Llama-architecture causal LM of a chosen size, saved as an ordinary Hugging
Face folder that ``AutoModelForCausalLM`` / ``AutoTokenizer`` (and vLLM) load like a downloaded one.

Also a small GSM8K-style JSONL of word problems (``prompt``, ``answer``, ``solution``) to train it on
with the ``dataset`` task. The weights are random: the point is the code path (tokenizer, chat
template, precision, memory, LoRA, exports), not the accuracy.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

ARCHITECTURES = ("qwen2", "llama")
EOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# ChatML, as Qwen2 instruct checkpoints ship it (our own wording of the template).
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Size:
    """Shape of a decoder-only transformer (parameters ≈ 12·L·H² + 2·V·H untied)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


# Named sizes; parameter counts with tied embeddings and the ~1 k-token vocabulary that
# ``make_example`` trains (a real 150 k vocabulary adds 150 k x hidden).
SIZES = {
    "tiny": Size(64, 2, 4, 2, 176),          # 0.15 M: tests
    "small": Size(256, 4, 4, 2, 704),        # 3.2 M: quick CPU runs
    "30m": Size(512, 10, 8, 4, 1536),        # 32 M
    "100m": Size(768, 13, 12, 4, 2560),      # 98 M
    "0.5b": Size(896, 24, 14, 2, 4864),      # Qwen2.5-0.5B's shape without its vocabulary: 0.36 B
}


def build_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 4096,
                        chat_template: str | None = CHAT_TEMPLATE) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts``: every byte is representable (no unknown
    token), specials ``<|endoftext|>`` (eos and pad), ``<|im_start|>``, ``<|im_end|>``; no bos, as in
    Qwen2. With ``chat_template`` (default ChatML) it renders conversations like a real checkpoint."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(list(texts), trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=EOS,
                                  additional_special_tokens=[IM_START, IM_END], padding_side="left",
                                  clean_up_tokenization_spaces=False, model_max_length=32768)
    if chat_template:
        tok.chat_template = chat_template
    return tok


def build_real_model(tokenizer: PreTrainedTokenizerFast, arch: str = "qwen2", size: str | Size = "tiny",
                     seed: int = 0, max_positions: int = 2048, tie_embeddings: bool = True) -> PreTrainedModel:
    """A randomly initialised ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` (float32) whose vocabulary
    is ``len(tokenizer)``; eos and pad ids from the tokenizer; chat turns end at ``<|im_end|>`` too."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"build_real_model: unknown arch '{arch}'; valid: {', '.join(ARCHITECTURES)}")
    shape = SIZES[size] if isinstance(size, str) and size in SIZES else size
    if not isinstance(shape, Size):
        raise ValueError(f"build_real_model: unknown size '{size}'; valid: {', '.join(SIZES)} or a Size")
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (EOS, IM_END)]
    config = AutoConfig.for_model(
        arch, vocab_size=len(tokenizer), hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate, max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings, bos_token_id=None, eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id, dtype="float32")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = model.generation_config
    gen.eos_token_id, gen.pad_token_id, gen.bos_token_id = eos_ids, tokenizer.pad_token_id, None
    return model


# --- a GSM8K-style word-problem set --------------------------------------------------------------

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena")
_ITEMS = ("apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards")


def word_problem(rng: random.Random) -> dict[str, str]:
    """One two-step word problem with a worked solution ending in ``\\boxed{answer}``."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
    kind = rng.randrange(3)
    if kind == 0:
        prompt = f"{name} has {a} {item} and buys {b} more. Then {name} gives away {c}. How many {item} are left?"
        mid, ans = a + b, a + b - c
        steps = f"{a} + {b} = {mid}. {mid} - {c} = {ans}."
    elif kind == 1:
        prompt = f"{name} has {c} boxes with {b} {item} in each and finds {a} more. How many {item} in total?"
        mid, ans = c * b, c * b + a
        steps = f"{c} * {b} = {mid}. {mid} + {a} = {ans}."
    else:
        prompt = f"{name} had {a + b} {item}, lost {b}, then doubled what was left. How many {item} now?"
        mid, ans = a, 2 * a
        steps = f"{a + b} - {b} = {mid}. 2 * {mid} = {ans}."
    return {"prompt": prompt, "answer": str(ans), "solution": f"{steps} The answer is \\boxed{{{ans}}}."}


def write_word_problems(path: str | Path, n: int, seed: int = 0) -> Path:
    """``n`` word problems as JSONL (columns prompt, answer, solution)."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(word_problem(rng)) + "\n" for _ in range(n)), encoding="utf-8")
    return path


def make_example(out: str | Path, arch: str = "qwen2", size: str | Size = "tiny", problems: int = 2000,
                 vocab_size: int = 4096, seed: int = 0) -> dict[str, str]:
    """Write ``out/data/train.jsonl`` (word problems) and ``out/model`` (a BPE tokenizer trained on
    them plus a random ``arch`` model of ``size``, saved with ``save_pretrained``). Returns the paths."""
    out = Path(out)
    data = write_word_problems(out / "data" / "train.jsonl", problems, seed)
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    texts = [f"{r['prompt']}\n{r['solution']}" for r in rows] + ["user", "assistant", "system"]
    tokenizer = build_bpe_tokenizer(texts, vocab_size=vocab_size)
    model = build_real_model(tokenizer, arch=arch, size=size, seed=seed)
    model_dir = out / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return {"model": str(model_dir), "data": str(data)}
