"""Training data of the user's own: a JSONL/JSON file or a `datasets` dataset, read as (prompt, response) pairs.

    python -m recipes.build_features --target my-model --out outputs/features --data my_chats.jsonl
    python -m recipes.self_distill --target my-model --out outputs/sd --data HuggingFaceH4/ultrachat_200k --split train_sft

`source`: a `.jsonl` / `.json` file; a directory of `.jsonl` files (read in name order, e.g. recipes.self_distill's
output); a directory written by `datasets.Dataset.save_to_disk`; or anything `datasets.load_dataset` takes (a Hub
dataset name, a local directory of csv/parquet/json files). `datasets` is needed only for the last two
(`pip install datasets`). Each row may be, in the common layouts:

- chat messages: `{"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}`
  (also under `conversation` / `conversations`, or ShareGPT's `[{"from": "human"|"gpt", "value": ...}]`);
- a pair: `prompt` / `instruction` (+ `input`, Alpaca) / `question` with `response` / `completion` / `output` /
  `answer`.

A conversation yields one pair per user turn that an assistant turn answers (the user turn as the prompt: earlier
turns are not kept, as the single-turn tokenisation of recipes.conversations expects). Rows without a response
still give prompts (for `recipes.self_distill`, which writes the target's own answers).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

PROMPT_KEYS = ("prompt", "instruction", "question")
RESPONSE_KEYS = ("response", "completion", "output", "answer")
MESSAGE_KEYS = ("messages", "conversation", "conversations")
USER_ROLES = {"user", "human"}
ASSISTANT_ROLES = {"assistant", "gpt", "model"}
STARTER_PROMPTS = Path(__file__).resolve().parent / "data" / "starter_prompts.jsonl"


def add_data_arguments(parser) -> None:
    """`--data` / `--split`, the same in every recipe."""
    parser.add_argument("--data", default=None, metavar="FILE_OR_DATASET",
                        help="your training data: a .jsonl/.json file of chats or prompt/response pairs, or a datasets "
                             "dataset (a save_to_disk directory, a local data directory or a Hub name); see "
                             "recipes/user_data.py. Default: this repository's ../shared/data (its own builds)")
    parser.add_argument("--split", default="train", help="with --data naming a datasets dataset: the split to read")


def starter_prompts_path() -> Path:
    """A small prompt set written for this project (Apache-2.0, shipped with the package): enough for the training
    notebook's self-distillation, nowhere near enough for a good drafter."""
    return STARTER_PROMPTS


def load_rows(source: str | Path, split: str = "train") -> Iterable[dict]:
    """The rows of `source` (see the module docstring), lazily where the format allows."""
    path = Path(source)
    if path.is_file():
        if path.suffix == ".jsonl":
            return _jsonl_rows(path)
        if path.suffix == ".json":
            rows = json.loads(path.read_text())
            if not isinstance(rows, list):
                raise ValueError(f"{path}: a .json data file must hold a list of rows (objects); use JSONL otherwise")
            return rows
        raise ValueError(f"{path}: unknown data file type {path.suffix!r}; give a .jsonl or .json file, or a datasets "
                         "dataset (a directory or a Hub name)")
    if path.is_dir() and not _is_saved_dataset(path) and sorted(path.glob("*.jsonl")):
        # A directory of JSONL files (e.g. recipes.self_distill's responses_*.jsonl): read in name order.
        return (row for file in sorted(path.glob("*.jsonl")) for row in _jsonl_rows(file))
    try:
        import datasets
    except ImportError as err:
        where = "directory" if path.is_dir() else "name"
        raise ImportError(f"--data {source!r} is a dataset {where}: reading it needs the `datasets` library "
                          "(pip install datasets), or give a .jsonl file") from err
    if path.is_dir() and _is_saved_dataset(path):
        loaded = datasets.load_from_disk(str(path))
        return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    return datasets.load_dataset(str(source), split=split)


def _is_saved_dataset(path: Path) -> bool:
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _jsonl_rows(path: Path) -> Iterator[dict]:
    with path.open() as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{number}: not a JSON object ({err.msg})") from err


def row_pairs(row: dict, where: str) -> list[tuple[str, str | None]]:
    """(prompt, response or None) pairs of one row; `where` names the row in errors."""
    for key in MESSAGE_KEYS:
        if isinstance(row.get(key), list):
            return _conversation_pairs(row[key], where)
    prompt_key = next((k for k in PROMPT_KEYS if isinstance(row.get(k), str)), None)
    if prompt_key is None:
        raise ValueError(
            f"{where}: no prompt found (keys {sorted(row)}). Each row needs chat messages under one of {MESSAGE_KEYS} "
            f"or a prompt under one of {PROMPT_KEYS} (with a response under one of {RESPONSE_KEYS})."
        )
    prompt = row[prompt_key]
    if prompt_key == "instruction" and row.get("input"):
        prompt = f"{prompt}\n\n{row['input']}"
    response = next((row[k] for k in RESPONSE_KEYS if isinstance(row.get(k), str)), None)
    return [(prompt, response)]


def _conversation_pairs(turns: list, where: str) -> list[tuple[str, str | None]]:
    pairs, pending = [], None
    for turn in turns:
        if not isinstance(turn, dict):
            raise ValueError(f"{where}: a conversation turn must be an object with role/content (or from/value)")
        role = str(turn.get("role", turn.get("from", ""))).lower()
        text = turn.get("content", turn.get("value"))
        if not isinstance(text, str):
            raise ValueError(f"{where}: a {role or 'turn'} turn has no text under 'content' (or 'value')")
        if role in USER_ROLES:
            if pending is not None:
                pairs.append((pending, None))
            pending = text
        elif role in ASSISTANT_ROLES and pending is not None:
            pairs.append((pending, text))
            pending = None
    if pending is not None:
        pairs.append((pending, None))
    return pairs


def user_pairs(source: str | Path, split: str = "train") -> Iterator[tuple[str, str | None]]:
    """(prompt, response or None) pairs of every row of `source`, in order."""
    for index, row in enumerate(load_rows(source, split)):
        yield from row_pairs(dict(row), f"{source} row {index}")


def user_conversations(source: str | Path, split: str = "train") -> Iterator[tuple[str, str]]:
    """(prompt, response) pairs with a response (for teacher forcing); an error if the data has none at all."""
    found = False
    for prompt, response in user_pairs(source, split):
        if response:
            found = True
            yield prompt, response
    if not found:
        raise ValueError(f"{source}: no row has a response; teacher forcing needs responses. For prompts only, let the "
                         "target answer them: python -m recipes.self_distill --data ... --features-out DIR")


def user_prompts(source: str | Path, split: str = "train") -> Iterator[dict]:
    """`{"prompt", "source", "license"}` rows for recipes.self_distill (the responses, if any, are not used)."""
    for prompt, _ in user_pairs(source, split):
        yield {"prompt": prompt, "source": str(source), "license": "user data"}
