"""Benchmark prompts: Spec-Bench (`question_id`, `category`, `turns`) and HumanEval (`task_id`, `prompt`) files.

MT-Bench rows of Spec-Bench carry their own categories (writing, roleplay, ...); Spec-Bench reports them
together as `mt_bench`, and so do we (the original category is kept as `subcategory`). HumanEval problems
are category `code`; the function stub is the user message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

SPEC_BENCH_CATEGORIES = {"translation", "summarization", "qa", "math_reasoning", "rag"}


@dataclass
class BenchPrompt:
    prompt_id: str
    category: str
    text: str  # the first user turn
    subcategory: str | None = None


@dataclass
class EncodedPrompt:
    prompt_id: str
    category: str
    input_ids: torch.Tensor  # [1, T]


def _row_to_prompt(row: dict, path: Path, line: int) -> BenchPrompt:
    if "turns" in row:
        category = row.get("category", "unknown")
        grouped = category if category in SPEC_BENCH_CATEGORIES or category == "unknown" else "mt_bench"
        return BenchPrompt(str(row.get("question_id", line)), grouped, row["turns"][0],
                           None if grouped == category else category)
    if "task_id" in row and "prompt" in row:
        return BenchPrompt(str(row["task_id"]), "code", row["prompt"])
    raise ValueError(
        f"{path}:{line}: neither a Spec-Bench row (question_id, category, turns) nor a HumanEval row "
        f"(task_id, prompt); keys are {sorted(row)}"
    )


def load_prompts(files: list[str | Path], limit_per_category: int | None = None) -> list[BenchPrompt]:
    """Prompts of every file in order; with `limit_per_category`, the first N of each category."""
    prompts: list[BenchPrompt] = []
    taken: dict[str, int] = {}
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise FileNotFoundError(f"prompt file {path} does not exist")
        for line, text in enumerate(path.read_text().splitlines(), start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line}: not valid JSON ({error})") from None
            prompt = _row_to_prompt(row, path, line)
            if limit_per_category is not None and taken.get(prompt.category, 0) >= limit_per_category:
                continue
            taken[prompt.category] = taken.get(prompt.category, 0) + 1
            prompts.append(prompt)
    if not prompts:
        raise ValueError(f"no prompts in {', '.join(map(str, files))}")
    return prompts


def encode_prompts(tokenizer, prompts: list[BenchPrompt]) -> list[EncodedPrompt]:
    """Apply the tokenizer's chat template (when it has one) to each prompt's first turn."""
    from hf_dynaspec.runner import encode_prompt

    return [EncodedPrompt(p.prompt_id, p.category, encode_prompt(tokenizer, p.text, None)) for p in prompts]
