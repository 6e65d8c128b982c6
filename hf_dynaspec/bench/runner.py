"""Load a target and its assistant by name, and compare plain with assisted greedy generation.

Shared by `hf-dynaspec generate` and `hf-dynaspec demo` (and the benchmark harness later).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_dynaspec.modeling.assistant import DynaSpecAssistant
from hf_dynaspec.exactness import check_exactness
from hf_dynaspec.zoo import resolve_model_path

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# Trained assistants shipped with the repository, one directory per zoo target name.
SHIPPED_ASSISTANTS = Path(__file__).resolve().parents[2] / "assistants"


def load_target(name_or_path: str, dtype: str = "bf16"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]).eval()
    return model, tokenizer


def shipped_assistant_dir(target_name: str) -> Path | None:
    """The best assistant the repository ships for a zoo target, if any."""
    candidate = SHIPPED_ASSISTANTS / Path(target_name).name
    return candidate if (candidate / "config.json").is_file() else None


def load_assistant(assistant: str | None, target, target_name: str) -> tuple[DynaSpecAssistant, str]:
    """(assistant, description). Without a path: the shipped one for this target, else a fresh untrained one."""
    if assistant is None:
        shipped = shipped_assistant_dir(target_name)
        if shipped is None:
            fresh = DynaSpecAssistant.from_target(target, target_name_or_path=target_name)
            return fresh, "untrained (no trained assistant ships for this target yet)"
        assistant = str(shipped)
    return DynaSpecAssistant.from_pretrained(assistant, target=target), assistant


def encode_prompt(tokenizer, prompt: str, chat: bool | None) -> torch.Tensor:
    """`[1, T]` prompt ids; with `chat` (default: when the tokenizer has a template) the chat template is applied."""
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    if chat:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        return ids
    return tokenizer(prompt, return_tensors="pt").input_ids


@dataclass
class Timed:
    new_ids: torch.Tensor  # [N] generated tokens
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.new_ids) / self.seconds if self.seconds > 0 else float("nan")


def timed_generate(model, input_ids: torch.Tensor, **kwargs) -> Timed:
    start = time.perf_counter()
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False, **kwargs)
    return Timed(out[0, input_ids.shape[1] :], time.perf_counter() - start)


def compare_plain_and_assisted(model, tokenizer, assistant, input_ids, max_new_tokens: int,
                               assisted_kwargs: dict | None = None) -> dict:
    """Greedy plain vs assisted on one prompt (a short warm-up of both first), with the near-tie check.

    `assisted_kwargs`: the generate() arguments of the assisted run (default: chain drafting,
    `assistant_model=assistant`; tree decoding passes `custom_generate` and `drafter`)."""
    assisted_kwargs = assisted_kwargs if assisted_kwargs is not None else {"assistant_model": assistant}
    timed_generate(model, input_ids, max_new_tokens=4)
    timed_generate(model, input_ids, max_new_tokens=4, **assisted_kwargs)
    plain = timed_generate(model, input_ids, max_new_tokens=max_new_tokens)
    assisted = timed_generate(model, input_ids, max_new_tokens=max_new_tokens, **assisted_kwargs)
    stats = assistant.stats.as_dict()
    divergence = check_exactness(model, input_ids, plain.new_ids, assisted.new_ids)
    return {
        "plain": tokenizer.decode(plain.new_ids, skip_special_tokens=True),
        "assisted": tokenizer.decode(assisted.new_ids, skip_special_tokens=True),
        "identical": divergence is None,
        "near_tie_margin": None if divergence is None else divergence.margin,
        "plain_tokens_per_s": plain.tokens_per_s,
        "assisted_tokens_per_s": assisted.tokens_per_s,
        "tau": stats["tau"],
        "speedup": assisted.tokens_per_s / plain.tokens_per_s,
        "divergence": None if divergence is None else divergence.as_dict(),
        "acceptance_histogram": stats["acceptance_histogram"],
        "plain_new_tokens": len(plain.new_ids),
        "assisted_new_tokens": len(assisted.new_ids),
    }
