"""Self-distillation data: the target answers the training prompts itself, in batches, resumably.

    python -m recipes.self_distill --target qwen2.5-coder-0.5b-instruct --out outputs/self_distill/qwen05 \
        --max-new-tokens 256 --batch-size 16

An EAGLE drafter is judged on the target's own (greedy) continuations; trained on other models' responses it
sees a different distribution of contexts (on the 0.5B target: top-1 agreement 0.48 on held-out training
text vs 0.31 on the target's own answers to the eval prompts, benchmarks/results/drafter_agreement_05b.json).
Here the target writes the responses: greedy, chat template applied, left-padded batches of similar-length
prompts (one batched step costs far less per token than a single stream on CPU as on GPU).

Prompts: `spec_train_prompts.jsonl` (chat, code, roleplay, math; its 30 prompts flagged for 10-gram
overlap with HumanEval are dropped; code prompts are capped at `--code-fraction` of the mix) interleaved
with GSM8K questions. Output: `responses_00000.jsonl`, ... with one `{"prompt", "response", "source"}` per
line; a finished file is never rewritten, so an interrupted run resumes at the next one. Feed them to
`recipes.build_features --conversations DIR`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm.auto import tqdm

from hf_dynaspec.runner import load_target
from recipes.data_paths import shared_data_dir


def training_prompts(data_dir: Path | None = None, code_fraction: float = 0.35, seed: int = 0) -> Iterator[dict]:
    """`{"prompt", "source"}` rows, a fixed shuffled mix (the same order on every run, so resuming is exact)."""
    data_dir = data_dir if data_dir is not None else shared_data_dir() / "train"
    rows = [json.loads(line) for line in (data_dir / "spec_train_prompts.jsonl").read_text().split("\n") if line.strip()]
    rows = [r for r in rows if not r.get("eval_10gram_overlap")]
    rng = random.Random(seed)
    code = [r for r in rows if r["category"] == "code"]
    other = [r for r in rows if r["category"] != "code"]
    keep_code = int(len(other) * code_fraction / (1 - code_fraction))
    mix = [{"prompt": r["turns"][0], "source": r["source"]} for r in other + rng.sample(code, min(keep_code, len(code)))]
    gsm8k = [json.loads(line) for line in (data_dir / "gsm8k_train.jsonl").read_text().split("\n") if line.strip()]
    mix += [{"prompt": r["question"], "source": "gsm8k"} for r in gsm8k[: len(mix) // 4]]
    rng.shuffle(mix)
    return iter(mix)


@torch.no_grad()
def answer_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, max_prompt_tokens: int) -> list[str]:
    """The target's greedy answers to `prompts` (one left-padded batch)."""
    encoded = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"][-max_prompt_tokens:]
               for p in prompts]
    length = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(encoded), length), pad, dtype=torch.long)
    mask = torch.zeros(len(encoded), length, dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, length - len(e):] = torch.tensor(e)
        mask[row, length - len(e):] = 1
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                         pad_token_id=pad)
    return [tokenizer.decode(row[length:], skip_special_tokens=True).strip() for row in out]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-prompts", type=int, default=4000)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=512, help="keep the last N tokens of long prompts")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--prompts-per-file", type=int, default=64)
    parser.add_argument("--code-fraction", type=float, default=0.35)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args(argv)

    model, tokenizer = load_target(args.target, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "meta.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}, indent=2) + "\n")
    prompts = itertools.islice(training_prompts(code_fraction=args.code_fraction), args.max_prompts)
    progress = tqdm(total=args.max_prompts, unit="prompt", desc="self-distillation")
    for index in itertools.count():
        chunk = list(itertools.islice(prompts, args.prompts_per_file))
        if not chunk:
            break
        path = args.out / f"responses_{index:05d}.jsonl"
        if path.exists():
            progress.update(len(chunk))
            continue
        # Similar lengths in a batch: less padding, and fewer finished rows waiting for the longest answer.
        chunk.sort(key=lambda r: len(r["prompt"]))
        lines = []
        for start in range(0, len(chunk), args.batch_size):
            batch = chunk[start : start + args.batch_size]
            answers = answer_batch(model, tokenizer, [r["prompt"] for r in batch], args.max_new_tokens,
                                   args.max_prompt_tokens)
            lines += [json.dumps({**r, "response": a}) for r, a in zip(batch, answers)]
            progress.update(len(batch))
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(path)
    progress.close()


if __name__ == "__main__":
    main()
