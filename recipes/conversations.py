"""Training conversations (prompt + response): the user's data (`--data`, recipes.user_data) or, by default for this
repository's own builds, ../shared/data/train, interleaved across sources.

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

from hf_dynaspec.loading import encode_prompt
from recipes.data_paths import shared_data_dir
from recipes.user_data import user_conversations


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


def conversations(data: str | Path | None = None, split: str = "train") -> Iterator[tuple[str, str]]:
    """(user prompt, assistant response) pairs.

    `data`: the user's own (a JSONL/JSON file or a `datasets` dataset, see recipes.user_data), read in order. Without
    it, this repository's default: the shared train/ data, its sources interleaved (for the project's own builds).
    """
    if data is not None:
        yield from user_conversations(data, split)
        return
    data_dir = shared_data_dir() / "train"
    sources = [
        _gpteacher(data_dir / "gpteacher_codegen-instruct.json"),
        _gpteacher(data_dir / "gpteacher_roleplay-simple-deduped-roleplay-instruct.json"),
        _gsm8k(data_dir / "gsm8k_train.jsonl"),
    ]
    for group in zip_longest(*sources):
        yield from (pair for pair in group if pair is not None)


def _file_index(path: Path) -> int:
    """responses_00023.jsonl -> 23."""
    return int(path.stem.rpartition("_")[2])


def self_distilled(directory: Path, first_file: int = 0, last_file: int | None = None) -> Iterator[tuple[str, str]]:
    """(prompt, the target's own response) pairs written by `recipes.self_distill`, file by file in order.

    Only files `responses_{i:05d}.jsonl` with first_file <= i <= last_file (None: no upper end) are read, so that
    features for newly written files can be cached without redoing the old ones.
    """
    if last_file is not None and last_file < first_file:
        raise ValueError(f"last_file ({last_file}) is before first_file ({first_file})")
    last = last_file if last_file is not None else float("inf")
    files = sorted(path for path in Path(directory).glob("responses_*.jsonl") if first_file <= _file_index(path) <= last)
    if not files:
        ranged = first_file or last_file is not None
        wanted = f" numbered {first_file}-{'' if last_file is None else last_file}" if ranged else ""
        raise FileNotFoundError(f"no responses_*.jsonl{wanted} in {directory}: run `python -m recipes.self_distill` "
                                "first (or check --first-file/--last-file)")
    for path in files:
        for line in path.read_text().split("\n"):  # not splitlines: U+2028 may occur inside strings
            if line.strip():
                row = json.loads(line)
                if row["response"]:
                    yield row["prompt"], row["response"]


def tokenize(tokenizer, prompt: str, response: str, max_length: int) -> tuple[list[int], int]:
    """Token ids of prompt + response (truncated to `max_length`) and where the response starts.

    Chat models: through the chat template. Base models (no template, e.g. Gemma-3-270M): the prompt as plain
    text, as `hf-dynaspec bench` and `encode_prompt` feed it, then the response after a blank line.
    """
    prompt_ids = encode_prompt(tokenizer, prompt, None)[0].tolist()
    if not getattr(tokenizer, "chat_template", None):
        response_ids = tokenizer("\n\n" + response, add_special_tokens=False)["input_ids"]
        return (prompt_ids + list(response_ids))[:max_length], len(prompt_ids)
    messages = [{"role": "user", "content": prompt}]
    full_ids = tokenizer.apply_chat_template(
        messages + [{"role": "assistant", "content": response}], tokenize=True, return_dict=True
    )["input_ids"]
    return list(full_ids[:max_length]), len(prompt_ids)
