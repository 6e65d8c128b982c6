"""Training conversations (prompt + response) from ../shared/data/train, interleaved across sources.

Teacher forcing on provided responses: GPTeacher codegen and roleplay (MIT, GPT-4 responses) and GSM8K
(MIT). The target's own next-token distribution on these texts is what the drafter learns, so the
responses need not be the target's own. Sources are interleaved round-robin so that any prefix of the
stream is a balanced mix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

from recipes.data_paths import shared_data_dir


def _gpteacher(path: Path) -> Iterator[tuple[str, str]]:
    for row in json.loads(path.read_text()):
        prompt = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
        if row.get("response"):
            yield prompt, row["response"]


def _gsm8k(path: Path) -> Iterator[tuple[str, str]]:
    with path.open() as rows:
        for line in rows:
            row = json.loads(line)
            yield row["question"], row["answer"]


def conversations(data_dir: Path | None = None) -> Iterator[tuple[str, str]]:
    """(user prompt, assistant response) pairs, the sources interleaved (default: the shared train/ data)."""
    data_dir = data_dir if data_dir is not None else shared_data_dir() / "train"
    sources = [
        _gpteacher(data_dir / "gpteacher_codegen-instruct.json"),
        _gpteacher(data_dir / "gpteacher_roleplay-simple-deduped-roleplay-instruct.json"),
        _gsm8k(data_dir / "gsm8k_train.jsonl"),
    ]
    for group in zip_longest(*sources):
        yield from (pair for pair in group if pair is not None)


def self_distilled(directory: Path) -> Iterator[tuple[str, str]]:
    """(prompt, the target's own response) pairs written by `recipes.self_distill`, file by file in order."""
    files = sorted(Path(directory).glob("responses_*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no responses_*.jsonl in {directory}: run `python -m recipes.self_distill` first")
    for path in files:
        for line in path.read_text().split("\n"):  # not splitlines: U+2028 may occur inside strings
            if line.strip():
                row = json.loads(line)
                if row["response"]:
                    yield row["prompt"], row["response"]


def tokenize(tokenizer, prompt: str, response: str, max_length: int) -> tuple[list[int], int]:
    """Chat-formatted token ids (truncated to `max_length`) and where the response starts."""
    messages = [{"role": "user", "content": prompt}]
    prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    full_ids = tokenizer.apply_chat_template(
        messages + [{"role": "assistant", "content": response}], tokenize=True, return_dict=True
    )["input_ids"]
    return list(full_ids[:max_length]), len(prompt_ids)
