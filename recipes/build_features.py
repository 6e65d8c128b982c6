"""Cache the target's last hidden states over training conversations, in resumable safetensors shards.

    python -m recipes.build_features --target qwen2.5-coder-0.5b-instruct --out data/features/qwen05 \
        --max-tokens 1000000

Each shard `shard_00000.safetensors` holds, for a few hundred sequences concatenated:
`input_ids` [N] int32, `hidden` [N, D] bf16 (the target's post-norm last hidden state), `response_mask` [N]
bool (True on response tokens), `offsets` [S + 1] int64 (sequence boundaries). A finished shard is never
rewritten, so an interrupted run resumes at the next one.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from hf_dynaspec.runner import load_target
from recipes.conversations import conversations, tokenize


def shard_path(out: Path, index: int) -> Path:
    return out / f"shard_{index:05d}.safetensors"


@torch.no_grad()
def target_hidden(model, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Post-norm last hidden states `[T_i, D]` of each sequence (one right-padded batch)."""
    length = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    mask = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    return [hidden[row, : len(seq)].to(torch.bfloat16).clone() for row, seq in enumerate(sequences)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-tokens", type=int, default=1_000_000, help="stop after this many tokens in all")
    parser.add_argument("--max-length", type=int, default=512, help="truncate conversations to this many tokens")
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--sequences-per-shard", type=int, default=256)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args(argv)

    # fp32: on CPUs without native bf16 matmuls (AVX2) a bf16 prefill is ~6x slower (benchmarks/results).
    model, tokenizer = load_target(args.target, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "meta.json").write_text(json.dumps({"target": args.target, "max_length": args.max_length}))
    pairs = conversations()
    shard_index, total_tokens = 0, 0
    progress = tqdm(total=args.max_tokens, unit="tok", desc="target features")
    while total_tokens < args.max_tokens:
        chunk = list(itertools.islice(pairs, args.sequences_per_shard))
        if not chunk:
            break
        tokenized = [tokenize(tokenizer, p, r, args.max_length) for p, r in chunk]
        tokens_in_shard = sum(len(ids) for ids, _ in tokenized)
        path = shard_path(args.out, shard_index)
        if path.exists():  # resume: finished shards are kept as they are
            total_tokens += tokens_in_shard
            progress.update(tokens_in_shard)
            shard_index += 1
            continue
        order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i][0]))
        hidden: dict[int, torch.Tensor] = {}
        batch: list[int] = []
        for i in order + [None]:
            longest = max([len(tokenized[j][0]) for j in batch] + ([len(tokenized[i][0])] if i is not None else [0]))
            if batch and (i is None or longest * (len(batch) + 1) > args.tokens_per_batch):
                for j, h in zip(batch, target_hidden(model, [tokenized[j][0] for j in batch])):
                    hidden[j] = h
                progress.update(sum(len(tokenized[j][0]) for j in batch))
                batch = []
            if i is not None:
                batch.append(i)
        ids = torch.cat([torch.tensor(t, dtype=torch.int32) for t, _ in tokenized])
        response_mask = torch.cat(
            [torch.arange(len(t)) >= start for t, start in tokenized]
        )
        offsets = torch.tensor([0] + list(itertools.accumulate(len(t) for t, _ in tokenized)), dtype=torch.int64)
        tmp = path.with_suffix(".tmp")
        save_file(
            {"input_ids": ids, "hidden": torch.cat([hidden[i] for i in range(len(tokenized))]),
             "response_mask": response_mask, "offsets": offsets},
            str(tmp),
        )
        tmp.rename(path)
        total_tokens += tokens_in_shard
        shard_index += 1
    progress.close()
    print(f"{shard_index} shards, {total_tokens} tokens in {args.out}")


if __name__ == "__main__":
    main()
