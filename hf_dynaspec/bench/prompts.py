"""Benchmark prompts: Spec-Bench (`question_id`, `category`, `turns`) and HumanEval (`task_id`, `prompt`) files.

MT-Bench rows of Spec-Bench carry their own categories (writing, roleplay, ...); Spec-Bench reports them
together as `mt_bench`, and so do we (the original category is kept as `subcategory`). HumanEval problems
are category `code`; the function stub is the user message.

MT-Bench's second turns are measured when asked (`encode_prompts(..., answer_first_turn=...)`): the
conversation is [turn 1, the target's own greedy answer to it, turn 2], as in MT-Bench and Spec-Bench, and
the prompt joins `mt_bench` with the id `<question_id>/turn2`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_dynaspec.loading import encode_prompt

SPEC_BENCH_CATEGORIES = {"translation", "summarization", "qa", "math_reasoning", "rag"}


@dataclass
class BenchPrompt:
    prompt_id: str
    category: str
    text: str  # the first user turn
    subcategory: str | None = None
    later_turns: tuple[str, ...] = ()  # further user turns (MT-Bench's second turn)


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
                           None if grouped == category else category, tuple(row["turns"][1:]))
    if "task_id" in row and "prompt" in row:
        return BenchPrompt(str(row["task_id"]), "code", row["prompt"])
    raise ValueError(
        f"{path}:{line}: neither a Spec-Bench row (question_id, category, turns) nor a HumanEval row "
        f"(task_id, prompt); keys are {sorted(row)}"
    )


def load_prompts(files: list[str | Path], limit_per_category: int | None = None,
                 categories: list[str] | None = None) -> list[BenchPrompt]:
    """Prompts of every file in order; with `limit_per_category`, the first N of each category; with `categories`,
    only those categories."""
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
            if categories is not None and prompt.category not in categories:
                continue
            if limit_per_category is not None and taken.get(prompt.category, 0) >= limit_per_category:
                continue
            taken[prompt.category] = taken.get(prompt.category, 0) + 1
            prompts.append(prompt)
    if not prompts:
        within = f" of the categories {', '.join(categories)}" if categories is not None else ""
        raise ValueError(f"no prompts{within} in {', '.join(map(str, files))}")
    return prompts


def encode_prompts(tokenizer, prompts: list[BenchPrompt], answer_first_turn=None) -> list[EncodedPrompt]:
    """Apply the tokenizer's chat template (when it has one) to each prompt's first turn.

    With `answer_first_turn(input_ids [1, T]) -> str` (the target's greedy answer), each MT-Bench prompt with
    a second turn also yields `<id>/turn2`: [turn 1, that answer, turn 2] through the chat template.
    """
    encoded = []
    for p in prompts:
        first = encode_prompt(tokenizer, p.text, None)
        encoded.append(EncodedPrompt(p.prompt_id, p.category, first))
        if answer_first_turn is not None and p.category == "mt_bench" and p.later_turns:
            if not getattr(tokenizer, "chat_template", None):
                raise ValueError("a second MT-Bench turn needs a tokenizer with a chat template")
            messages = [{"role": "user", "content": p.text},
                        {"role": "assistant", "content": answer_first_turn(first)},
                        {"role": "user", "content": p.later_turns[0]}]
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)["input_ids"]
            encoded.append(EncodedPrompt(f"{p.prompt_id}/turn2", p.category, ids))
    return encoded
