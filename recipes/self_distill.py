"""Self-distillation data: the target answers the training prompts itself, in batches, resumably.

    python -m recipes.self_distill --target qwen2.5-coder-0.5b-instruct --out outputs/self_distill/qwen05 \
        --max-new-tokens 256 --batch-size auto --features-out outputs/features/qwen05-sd2
    # sampled answers at the checkpoint's published settings, into a directory of their own:
    python -m recipes.self_distill --target qwen2.5-coder-0.5b-instruct --out outputs/self_distill/qwen05-s1 \
        --sample --seed 1 --max-prompts 20000 --batch-size auto

An EAGLE drafter is judged on the target's own (greedy) continuations; trained on other models' responses it
sees a different distribution of contexts (on the 0.5B target: top-1 agreement 0.48 on held-out training
text vs 0.31 on the target's own answers to the eval prompts, benchmarks/results/drafter_agreement_05b.json).
Here the target writes the responses: greedy (or sampled with `--sample`), chat template applied, left-padded
batches of similar-length prompts (one batched step costs far less per token than a single stream on CPU as on
GPU), bf16 where the host multiplies it natively (`--dtype auto`). A file's prompts are cut into the batches that
pad least for what one more batch costs (`padded_batches`, `--batch-cost auto` measures it), so a single long
prompt no longer pads a whole batch to its length.

Prompts: the user's (`--data FILE_OR_DATASET`, recipes.user_data: chats or prompt rows; the responses, if any, are
replaced by the target's own), a Spec-Bench-format file (`--prompts FILE`, such as recipes.task_prompts' output), or
by default, for this repository's own builds:
`spec_train_prompts.jsonl` (chat, code, roleplay, math; its 30 prompts flagged for 10-gram
overlap with HumanEval are dropped; code prompts are capped at `--code-fraction` of the mix) interleaved
with GSM8K questions, then the rest of both (`--max-prompts 20000` answers all ~16.8k). Output:
`responses_00000.jsonl`, ... with one `{"prompt", "response", "source"}` per line; a finished file is never
rewritten, so an interrupted run resumes at the next one. Feed them to
`recipes.build_features --conversations DIR`, or pass `--features-out DIR`: the hidden states the generation
computes anyway are then written as drafter-training shards directly (one per responses file), which saves
the second target pass over prompt and answer (on 2 cores: 13 minutes for the first 128 answers, against
13-18 minutes to generate 64 answers at batch 64). Batch size: one fp32 decoding step of the 0.5B target on
2 cores gives 16 tok/s at batch 16 and 30 tok/s at batch 64 (benchmarks/results/self_distill_batch_05b.txt); in
bf16 on an AMX host, 101, 166 and 200 tok/s at batch 16, 32 and 64
(benchmarks/results/round_93/batch_rates_05b_bf16.txt). `OUT/progress.log` records each file's answer tokens,
seconds and host kind: the recipe's rate where it ran.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.summary import host_kind
from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.loading import encode_prompt, load_target, resolve_device
from hf_dynaspec.modeling.drafter import output_cache
from hf_dynaspec.zoo import published_sampling
from recipes.build_features import pack_shard, shard_path
from recipes.data_paths import shared_data_dir
from recipes.sampled_answers import sparse_sampling
from recipes.training_schedule import native_dtype
from recipes.user_data import add_data_arguments, user_prompts


def prompt_mix(data_dir: Path | None = None, code_fraction: float = 0.35, seed: int = 0) -> tuple[list, list]:
    """(the balanced mix, the rest) of the training prompts as `{"prompt", "source", "license"}` rows, each in a
    fixed shuffled order (the same on every run, so resuming is exact, and file N of any run holds the same
    prompts). The mix caps code prompts at `code_fraction` and GSM8K questions at a quarter of the rest; the rest
    is every clean prompt past those caps."""
    data_dir = data_dir if data_dir is not None else shared_data_dir() / "train"
    rows = [json.loads(line) for line in (data_dir / "spec_train_prompts.jsonl").read_text().split("\n") if line.strip()]
    rows = [r for r in rows if not r.get("eval_10gram_overlap")]
    rng = random.Random(seed)
    code = [r for r in rows if r["category"] == "code"]
    other = [r for r in rows if r["category"] != "code"]
    keep_code = int(len(other) * code_fraction / (1 - code_fraction))
    kept_code = rng.sample(code, min(keep_code, len(code)))
    mix = [{"prompt": r["turns"][0], "source": r["source"], "license": r["license"]} for r in other + kept_code]
    gsm8k = [json.loads(line) for line in (data_dir / "gsm8k_train.jsonl").read_text().split("\n") if line.strip()]
    gsm8k = [{"prompt": r["question"], "source": "gsm8k", "license": "MIT"} for r in gsm8k]
    taken_gsm8k = len(mix) // 4
    mix += gsm8k[:taken_gsm8k]
    rng.shuffle(mix)
    kept = {id(r) for r in kept_code}
    rest = [{"prompt": r["turns"][0], "source": r["source"], "license": r["license"]} for r in code if id(r) not in kept]
    rest += gsm8k[taken_gsm8k:]
    random.Random(seed + 1).shuffle(rest)  # its own generator: the mix's order does not depend on the rest
    return mix, rest


def training_prompts(data_dir: Path | None = None, code_fraction: float = 0.35, seed: int = 0) -> Iterator[dict]:
    """Every training prompt: the balanced mix first (the files earlier runs wrote hold its prompts), then the
    rest (more code and GSM8K), for runs that answer all ~16k."""
    mix, rest = prompt_mix(data_dir, code_fraction, seed)
    return iter(mix + rest)


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
    num_generated: int = 0  # answer tokens the target produced, the final EOS included (the recipe's rate)


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
                   capture_hidden: bool = False, sampling: dict | None = None) -> list[Answer]:
    """The target's answers to `prompts` (one left-padded batch): greedy, or sampled with `sampling` (generate()'s
    keyword arguments, e.g. the checkpoint's published settings); with `capture_hidden`, also the hidden states the
    generation computed anyway, so that no second target pass is needed for drafter features."""
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
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                             **(sparse_sampling(sampling, model.generation_config) if sampling else {"do_sample": False}),
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
        answer = Answer(tokenizer.decode(generated, skip_special_tokens=True).strip(), token_ids, len(prompt_ids),
                        num_generated=len(generated))
        if hidden is not None:
            start = length - len(prompt_ids)
            answer.hidden = hidden[row, start : start + len(token_ids)].cpu().clone()
        answers.append(answer)
    return answers


def answer_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, max_prompt_tokens: int) -> list[str]:
    """The target's greedy answers to `prompts` as text (one left-padded batch)."""
    return [a.text for a in generate_batch(model, tokenizer, prompts, max_new_tokens, max_prompt_tokens)]


def sampling_settings(target: str, model) -> dict:
    """generate()'s sampling arguments for --sample: the zoo model's published settings (its GGUF copy does not
    carry them), else the checkpoint's own generation config; an error when it has none."""
    settings = published_sampling(target)
    if settings is None:
        config = model.generation_config
        if not config.do_sample:
            raise SystemExit(f"--sample: {target}'s generation_config.json does not sample (do_sample is false), so "
                             "it publishes no sampling settings: add them there (do_sample, temperature, top_p, ...)")
        settings = {"do_sample": True, "temperature": config.temperature, "top_p": config.top_p,
                    "top_k": config.top_k, "repetition_penalty": config.repetition_penalty}
    return {k: v for k, v in settings.items() if v is not None}


def random_ids(model, rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """[rows, length] ids for a timing, inside any vocabulary (below min(10,000, its size)), on the model's device."""
    embeddings = model.get_input_embeddings().weight
    return torch.randint(0, min(10000, len(embeddings)), (rows, length), generator=generator).to(embeddings.device)


@torch.no_grad()
def measured_batch_size(model, candidates=(8, 16, 32, 64), context: int = 320, steps: int = 4) -> tuple[int, dict]:
    """--batch-size auto: (the batch size, {batch: decoded tokens/s}). One-token steps over a `context`-token cache
    (a prompt and half an answer) are timed at each size; the smallest within 10% of the best wins, since a
    larger batch waits longer for its longest answer and pads more."""
    generator = torch.Generator().manual_seed(0)
    rates = {}
    # The first size twice, the second kept (a process's first steps set kernels up: batch 8 gave 3.4 tokens/s
    # first, 53 after).
    for batch in (candidates[0], *candidates):
        ids = random_ids(model, batch, context, generator)
        # the last position's logits only: full ones at batch 64 x 320 tokens are 6 GB of bf16
        cache = output_cache(model(ids, use_cache=True, logits_to_keep=1))
        token, times = ids[:, -1:], []
        for _ in range(steps):
            start = time.perf_counter()
            logits = model(token, **cache_kwargs(model, cache), use_cache=True).logits
            token = logits[:, -1:].argmax(-1)  # the next step needs it: this waits for the device too
            times.append(time.perf_counter() - start)
        rates[batch] = batch / sorted(times)[steps // 2]
    best = max(rates.values())
    return min(b for b, rate in rates.items() if rate >= 0.9 * best), rates


@torch.no_grad()
def measured_batch_cost(model, max_new_tokens: int, rows: int = 4, length: int = 64, repeats: int = 3) -> float:
    """--batch-cost auto: one more batch's price in padded prompt tokens: `max_new_tokens` one-row decoding steps over
    one prefill token's time. A padded token also costs each step's attention, which this leaves out: it overprices a
    batch, so padded_batches cuts only where the saving is clear."""
    ids = random_ids(model, rows, length, torch.Generator().manual_seed(0))

    def timed(run) -> float:
        times = []
        for _ in range(repeats + 1):  # the first call is a warm-up (as in measured_batch_size)
            start = time.perf_counter()
            run().argmax(-1).tolist()  # waits for the device too
            times.append(time.perf_counter() - start)
        return sorted(times[1:])[repeats // 2]

    # The last position's logits only, as generate() prefills (logits_to_keep=1).
    prefill = timed(lambda: model(ids, use_cache=True, logits_to_keep=1)["logits"][:, -1]) / (rows * length)
    cache = output_cache(model(ids[:1], use_cache=True))
    step = timed(lambda: model(ids[:1, -1:], **cache_kwargs(model, cache), use_cache=True)["logits"][:, -1])
    return max_new_tokens * step / prefill


def padded_batches(lengths: list[int], batch_size: int, batch_cost: float) -> list[tuple[int, int]]:
    """(start, end) batches of length-sorted prompts (`lengths` ascending, in tokens), at most `batch_size` each: the cut
    with the fewest padded prompt tokens plus `batch_cost` per batch, exact (dynamic programming). One long prompt
    no longer pads a whole batch (a 512-token one among ~60-token ones: 1.7x the file's time on an AVX2 host)."""
    best, start_of = [0.0] + [float("inf")] * len(lengths), [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        for start in range(max(0, end - batch_size), end):
            cost = best[start] + (end - start) * lengths[end - 1] + batch_cost
            if cost < best[end]:
                best[end], start_of[end] = cost, start
    spans, end = [], len(lengths)
    while end:
        spans.append((start_of[end], end))
        end = start_of[end]
    return spans[::-1]


def prompt_lengths(tokenizer, prompts: list[str], max_prompt_tokens: int) -> list[int]:
    """Each prompt's length in tokens as generate_batch encodes it (chat template, the last `max_prompt_tokens`)."""
    return [min(encode_prompt(tokenizer, p, None).shape[-1], max_prompt_tokens) for p in prompts]


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-prompts", type=int, default=4000, help="stop at this prompt of the fixed order")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-prompt-tokens", type=int, default=512, help="keep the last N tokens of long prompts")
    parser.add_argument("--batch-size", default="16",
                        help="answers per batched generate(), or auto: the size with the best measured tokens/s")
    parser.add_argument("--batch-cost", default="auto",
                        help="what one more batch costs in padded prompt tokens, or auto: measured (a file's prompts are "
                             "cut into the batches that pad least for it, at most --batch-size each)")
    parser.add_argument("--prompts-per-file", type=int, default=64)
    parser.add_argument("--first-file", type=int, default=0,
                        help="start at responses file N of the fixed prompt order (prompts N*per-file onwards): new "
                             "prompts for a drafter that was trained on files 0..N-1")
    parser.add_argument("--code-fraction", type=float, default=0.35)
    parser.add_argument("--prompts", type=Path, default=None,
                        help="answer the prompts of this Spec-Bench-format file (in its order) instead of the "
                             "default training mix, e.g. recipes.task_prompts' output")
    parser.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                        help="auto: bf16 on sm_80+ GPUs and native-bf16 CPUs (avx512_bf16 / AMX), fp16 on older "
                             "GPUs (a T4), fp32 on other CPUs (AVX2)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    parser.add_argument("--sample", action="store_true",
                        help="sampled answers at the checkpoint's published settings (sampled acceptance learns the "
                             "target's distribution, not only its argmax), seeded per file: --seed * 1000003 + N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features-out", type=Path, default=None,
                        help="also write drafter-training shards (recipes.build_features' format) from the hidden "
                             "states the generation computed, one shard per responses file: no second target pass")
    parser.add_argument("--topk", type=int, default=16, help="next-token candidates kept per position (shards)")
    add_data_arguments(parser)
    args = parser.parse_args(argv)
    if args.data and args.prompts:
        parser.error("--data and --prompts both name the prompts: give one")
    if args.batch_size != "auto" and not args.batch_size.isdigit():
        parser.error(f"--batch-size takes a positive integer or auto, got {args.batch_size!r}")
    if args.batch_cost != "auto":
        try:
            args.batch_cost = float(args.batch_cost)
        except ValueError:
            parser.error(f"--batch-cost takes a number of prompt tokens or auto, got {args.batch_cost!r}")
        if not args.batch_cost >= 0:
            parser.error(f"--batch-cost is a price in prompt tokens: >= 0, got {args.batch_cost}")
    return args


def prompt_rows(args: argparse.Namespace) -> Iterator[dict]:
    """The run's prompts, from --first-file's first prompt up to --max-prompts."""
    if args.prompts:
        rows = list(prompt_file_rows(args.prompts))
    elif args.data:
        rows = list(user_prompts(args.data, args.split))
    else:
        rows = list(training_prompts(code_fraction=args.code_fraction))
    return itertools.islice(rows, args.first_file * args.prompts_per_file, min(args.max_prompts, len(rows)))


def write_file(model, tokenizer, args, index: int, chunk: list[dict], sampling: dict | None, progress) -> dict:
    """Answer one file's prompts and write it (its shard first, with --features-out); its progress record."""
    start = time.perf_counter()
    if sampling is not None:  # per file: a resumed run samples file N exactly as an uninterrupted one
        torch.manual_seed(args.seed * 1_000_003 + index)
    # Similar lengths in a batch: less padding, and fewer finished rows waiting for the longest answer.
    lengths = prompt_lengths(tokenizer, [r["prompt"] for r in chunk], args.max_prompt_tokens)
    order = sorted(range(len(chunk)), key=lambda i: lengths[i])
    chunk, lengths = [chunk[i] for i in order], [lengths[i] for i in order]
    spans = padded_batches(lengths, args.batch_size, args.batch_cost)
    lines, answers, generated = [], [], 0
    for first, end in spans:
        batch = chunk[first:end]
        batch_answers = generate_batch(model, tokenizer, [r["prompt"] for r in batch], args.max_new_tokens,
                                       args.max_prompt_tokens, args.features_out is not None, sampling)
        lines += [json.dumps({**r, "response": a.text}) for r, a in zip(batch, batch_answers)]
        answers += [a for a in batch_answers if a.text and len(a.token_ids) >= 3]
        generated += sum(a.num_generated for a in batch_answers)
        progress.update(len(batch))
    if args.features_out is not None:  # the shard first: a responses file without its shard is never left
        tensors = pack_shard(model, [(a.token_ids, a.response_start) for a in answers],
                             [a.hidden for a in answers], args.topk)
        shard = shard_path(args.features_out, index)
        save_file(tensors, str(shard.with_suffix(".tmp")))
        shard.with_suffix(".tmp").rename(shard)
    path = args.out / f"responses_{index:05d}.jsonl"
    path.with_suffix(".tmp").write_text("\n".join(lines) + "\n")
    path.with_suffix(".tmp").rename(path)
    seconds = time.perf_counter() - start
    return {"file": index, "prompts": len(chunk), "answer_tokens": generated, "seconds": round(seconds, 1),
            "tokens_per_hour": round(generated * 3600 / seconds), "dtype": args.dtype,
            "batch_size": args.batch_size, "batch_cost": args.batch_cost, "batches": [end - first for first, end in spans],
            "padded_prompt_tokens": sum((end - first) * lengths[end - 1] for first, end in spans),
            "host_kind": host_kind({"host": host_description()}),
            "host": host_description(), "sample": sampling is not None}


def main(argv=None) -> None:
    args = parse_arguments(argv)
    device = resolve_device(args.device)
    args.dtype = native_dtype(device) if args.dtype == "auto" else args.dtype
    model, tokenizer = load_target(args.target, args.dtype, str(device))
    sampling = sampling_settings(args.target, model) if args.sample else None
    args.out.mkdir(parents=True, exist_ok=True)
    # One JSON record per file written (the rate per host kind, kept with the data); not a .jsonl file, which a
    # directory of answers read as user data (`--data OUT`, recipes.user_data) would take for prompts.
    log = args.out / "progress.log"
    if args.batch_size == "auto":
        args.batch_size, rates = measured_batch_size(model, [b for b in (8, 16, 32, 64) if b <= args.prompts_per_file])
        print(f"batch size {args.batch_size} (decoded tokens/s by batch: {rates})", flush=True)
    args.batch_size = int(args.batch_size)
    (args.out / "meta.json").write_text(json.dumps({**{k: str(v) for k, v in vars(args).items()},
                                                    "sampling": sampling}, indent=2) + "\n")
    if args.features_out is not None:
        args.features_out.mkdir(parents=True, exist_ok=True)
        (args.features_out / "meta.json").write_text(json.dumps(
            {"target": args.target, "dtype": args.dtype, "topk": args.topk, "conversations": str(args.out),
             "captured_during_generation": True}))
    prompts = list(prompt_rows(args))
    progress = tqdm(total=len(prompts), unit="prompt", desc="self-distillation")
    for number, first in enumerate(range(0, len(prompts), args.prompts_per_file)):
        index, chunk = args.first_file + number, prompts[first : first + args.prompts_per_file]
        if (args.out / f"responses_{index:05d}.jsonl").exists():  # a run without --features-out keeps no shard
            progress.update(len(chunk))  # (build_features makes them)
            continue
        if args.batch_cost == "auto":  # measured once, and only by a run that writes a file
            args.batch_cost = round(measured_batch_cost(model, args.max_new_tokens))
            print(f"one more batch costs {args.batch_cost} padded prompt tokens (measured)", flush=True)
        record = write_file(model, tokenizer, args, index, chunk, sampling, progress)
        with log.open("a") as table:
            table.write(json.dumps(record) + "\n")
    progress.close()


if __name__ == "__main__":
    main()
