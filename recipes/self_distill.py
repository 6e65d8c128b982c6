"""Self-distillation data: the target answers the training prompts itself, in batches, resumably.

    python -m recipes.self_distill --target qwen2.5-coder-0.5b-instruct --out outputs/self_distill/qwen05 \
        --max-new-tokens 256 --batch-size 64 --features-out outputs/features/qwen05-sd2

An EAGLE drafter is judged on the target's own (greedy) continuations; trained on other models' responses it
sees a different distribution of contexts (on the 0.5B target: top-1 agreement 0.48 on held-out training
text vs 0.31 on the target's own answers to the eval prompts, benchmarks/results/drafter_agreement_05b.json).
Here the target writes the responses: greedy, chat template applied, left-padded batches of similar-length
prompts (one batched step costs far less per token than a single stream on CPU as on GPU).

Prompts: the user's (`--data FILE_OR_DATASET`, recipes.user_data: chats or prompt rows; the responses, if any, are
replaced by the target's own), a Spec-Bench-format file (`--prompts FILE`, such as recipes.task_prompts' output), or
by default, for this repository's own builds:
`spec_train_prompts.jsonl` (chat, code, roleplay, math; its 30 prompts flagged for 10-gram
overlap with HumanEval are dropped; code prompts are capped at `--code-fraction` of the mix) interleaved
with GSM8K questions. Output: `responses_00000.jsonl`, ... with one `{"prompt", "response", "source"}` per
line; a finished file is never rewritten, so an interrupted run resumes at the next one. Feed them to
`recipes.build_features --conversations DIR`, or pass `--features-out DIR`: the hidden states the generation
computes anyway are then written as drafter-training shards directly (one per responses file), which saves
the second target pass over prompt and answer (on 2 cores: 13 minutes for the first 128 answers, against
13-18 minutes to generate 64 answers at batch 64). Batch size: one fp32 decoding step of the 0.5B target on
2 cores gives 16 tok/s at batch 16 and 30 tok/s at batch 64 (benchmarks/results/self_distill_batch_05b.txt).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from hf_dynaspec.loading import encode_prompt, load_target
from recipes.build_features import pack_shard, shard_path
from recipes.data_paths import shared_data_dir
from recipes.user_data import add_data_arguments, user_prompts


def training_prompts(data_dir: Path | None = None, code_fraction: float = 0.35, seed: int = 0) -> Iterator[dict]:
    """`{"prompt", "source", "license"}` rows, a fixed shuffled mix (the same order on every run, so resuming is
    exact, and file N of any run holds the same prompts)."""
    data_dir = data_dir if data_dir is not None else shared_data_dir() / "train"
    rows = [json.loads(line) for line in (data_dir / "spec_train_prompts.jsonl").read_text().split("\n") if line.strip()]
    rows = [r for r in rows if not r.get("eval_10gram_overlap")]
    rng = random.Random(seed)
    code = [r for r in rows if r["category"] == "code"]
    other = [r for r in rows if r["category"] != "code"]
    keep_code = int(len(other) * code_fraction / (1 - code_fraction))
    mix = [{"prompt": r["turns"][0], "source": r["source"], "license": r["license"]}
           for r in other + rng.sample(code, min(keep_code, len(code)))]
    gsm8k = [json.loads(line) for line in (data_dir / "gsm8k_train.jsonl").read_text().split("\n") if line.strip()]
    mix += [{"prompt": r["question"], "source": "gsm8k", "license": "MIT"} for r in gsm8k[: len(mix) // 4]]
    rng.shuffle(mix)
    return iter(mix)


def prompt_file_rows(path: Path) -> Iterator[dict]:
    """`{"prompt", "source", "license", "category"}` rows of a Spec-Bench-format file (first turns), in file order
    (e.g. recipes.task_prompts' output)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not row.get("turns"):
            raise ValueError(f"{path}:{number}: not a Spec-Bench row (no 'turns'); recipes.task_prompts writes them")
        yield {"prompt": row["turns"][0], "source": row.get("source", "prompt-file"), "license": row.get("license", ""),
               "category": row.get("category", "unknown")}


@dataclass
class Answer:
    """One greedy answer: its text, the token ids of prompt + answer as the target ran them, where the
    answer starts, and (when captured) the target's post-norm hidden states `[len(token_ids), D]`.

    `token_ids` end just before the answer's last token (EOS, or the token at the length cap): that token
    was produced but never fed back, so it has no hidden state; the last position's next token is it.
    """

    text: str
    token_ids: list[int]
    response_start: int
    hidden: torch.Tensor | None = None


class _FinalNormRecorder:
    """Records the output of the target's final norm on every forward pass (prefill, then one per token)."""

    def __init__(self, model):
        self.outputs: list[torch.Tensor] = []
        self.handle = model.model.norm.register_forward_hook(lambda module, args, out: self.outputs.append(out))

    def close(self) -> torch.Tensor:
        self.handle.remove()
        return torch.cat(self.outputs, dim=1)  # [B, L + G - 1, D]


@torch.no_grad()
def generate_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, max_prompt_tokens: int,
                   capture_hidden: bool = False) -> list[Answer]:
    """The target's greedy answers to `prompts` (one left-padded batch); with `capture_hidden`, also the hidden
    states the generation computed anyway, so that no second target pass is needed for drafter features."""
    # Chat template when the tokenizer has one, else plain text (base models), exactly as the benchmark encodes.
    encoded = [encode_prompt(tokenizer, p, None)[0].tolist()[-max_prompt_tokens:] for p in prompts]
    length = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(encoded), length), pad, dtype=torch.long)
    mask = torch.zeros(len(encoded), length, dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, length - len(e):] = torch.tensor(e)
        mask[row, length - len(e):] = 1
    recorder = _FinalNormRecorder(model) if capture_hidden else None
    try:
        device = model.get_input_embeddings().weight.device
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad).cpu()
    finally:
        hidden = recorder.close() if recorder is not None else None
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    answers = []
    for row, prompt_ids in enumerate(encoded):
        generated = out[row, length:].tolist()
        end = next((i + 1 for i, token in enumerate(generated) if token in eos), len(generated))
        generated = generated[:end]
        token_ids = prompt_ids + generated[:-1]
        answer = Answer(tokenizer.decode(generated, skip_special_tokens=True).strip(), token_ids, len(prompt_ids))
        if hidden is not None:
            start = length - len(prompt_ids)
            answer.hidden = hidden[row, start : start + len(token_ids)].cpu().clone()
        answers.append(answer)
    return answers


def answer_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, max_prompt_tokens: int) -> list[str]:
    """The target's greedy answers to `prompts` as text (one left-padded batch)."""
    return [a.text for a in generate_batch(model, tokenizer, prompts, max_new_tokens, max_prompt_tokens)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-prompts", type=int, default=4000, help="stop at this prompt of the fixed order")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=512, help="keep the last N tokens of long prompts")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--prompts-per-file", type=int, default=64)
    parser.add_argument("--first-file", type=int, default=0,
                        help="start at responses file N of the fixed prompt order (prompts N*per-file onwards): new "
                             "prompts for a drafter that was trained on files 0..N-1")
    parser.add_argument("--code-fraction", type=float, default=0.35)
    parser.add_argument("--prompts", type=Path, default=None,
                        help="answer the prompts of this Spec-Bench-format file (in its order) instead of the "
                             "default training mix, e.g. recipes.task_prompts' output")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="fp16 on GPUs without bf16 (a T4); fp32 on CPUs without native bf16 (AVX2)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    parser.add_argument("--features-out", type=Path, default=None,
                        help="also write drafter-training shards (recipes.build_features' format) from the hidden "
                             "states the generation computed, one shard per responses file: no second target pass")
    parser.add_argument("--topk", type=int, default=16, help="next-token candidates kept per position (shards)")
    add_data_arguments(parser)
    args = parser.parse_args(argv)
    if args.data and args.prompts:
        parser.error("--data and --prompts both name the prompts: give one")

    model, tokenizer = load_target(args.target, args.dtype, args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "meta.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}, indent=2) + "\n")
    if args.features_out is not None:
        args.features_out.mkdir(parents=True, exist_ok=True)
        (args.features_out / "meta.json").write_text(json.dumps(
            {"target": args.target, "dtype": args.dtype, "topk": args.topk, "conversations": str(args.out),
             "captured_during_generation": True}))
    first_prompt = args.first_file * args.prompts_per_file
    if args.prompts:
        rows = list(prompt_file_rows(args.prompts))
        last_prompt = min(args.max_prompts, len(rows))
    elif args.data:
        rows = list(user_prompts(args.data, args.split))
        last_prompt = min(args.max_prompts, len(rows))
    else:
        rows, last_prompt = training_prompts(code_fraction=args.code_fraction), args.max_prompts
    prompts = itertools.islice(rows, first_prompt, last_prompt)
    progress = tqdm(total=max(0, last_prompt - first_prompt), unit="prompt", desc="self-distillation")
    for index in itertools.count(args.first_file):
        chunk = list(itertools.islice(prompts, args.prompts_per_file))
        if not chunk:
            break
        path = args.out / f"responses_{index:05d}.jsonl"
        if path.exists():  # files from a run without --features-out keep no shard: build_features makes them
            progress.update(len(chunk))
            continue
        # Similar lengths in a batch: less padding, and fewer finished rows waiting for the longest answer.
        chunk.sort(key=lambda r: len(r["prompt"]))
        lines, answers = [], []
        for start in range(0, len(chunk), args.batch_size):
            batch = chunk[start : start + args.batch_size]
            batch_answers = generate_batch(model, tokenizer, [r["prompt"] for r in batch], args.max_new_tokens,
                                           args.max_prompt_tokens, capture_hidden=args.features_out is not None)
            lines += [json.dumps({**r, "response": a.text}) for r, a in zip(batch, batch_answers)]
            answers += [a for a in batch_answers if a.text and len(a.token_ids) >= 3]
            progress.update(len(batch))
        if args.features_out is not None:  # the shard first: a responses file without its shard is never left
            args.features_out.mkdir(parents=True, exist_ok=True)
            tensors = pack_shard(model, [(a.token_ids, a.response_start) for a in answers],
                                 [a.hidden for a in answers], args.topk)
            shard = shard_path(args.features_out, index)
            save_file(tensors, str(shard.with_suffix(".tmp")))
            shard.with_suffix(".tmp").rename(shard)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(path)
    progress.close()


if __name__ == "__main__":
    main()
