"""Loading a target by zoo name or path, and encoding a user prompt: what the recipes, the bench and the CLI share.

Below `bench/` (which imports it), so that training recipes need nothing of the benchmark harness.
"""

from __future__ import annotations

import torch

from hf_dynaspec.zoo import resolve_model_path

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" -> the first CUDA device when there is one, else the CPU; anything else as torch reads it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_target(name_or_path: str, dtype: str = "bf16", device: str = "cpu"):
    """(model in eval mode on `device`, tokenizer). `dtype`: "bf16", "fp16" (a T4's) or "fp32"."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]).to(resolve_device(device)).eval()
    return model, tokenizer


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
