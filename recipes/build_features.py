"""Cache the target's last hidden states over training conversations, in resumable safetensors shards.

    python -m recipes.build_features --target qwen2.5-coder-0.5b-instruct --out data/features/qwen05 \
        --max-tokens 1000000 [--data my_chats.jsonl | --data HUB_DATASET --split train]

Each shard `shard_00000.safetensors` holds, for a few hundred sequences concatenated:
`input_ids` [N] int32, `hidden` [N, D] bf16 (the target's post-norm last hidden state), `topk_ids` [N, k]
int32 and `topk_logp` [N, k] fp32 (the target's k most likely next tokens after each position and their
log-probabilities under the full-vocabulary softmax), `response_mask` [N] bool (True on response tokens),
`offsets` [S + 1] int64 (sequence boundaries); with `--fused-hidden-states I,J,..` also `fused_hidden` [N, n*D] bf16
(the target's `hidden_states[I]`, `hidden_states[J]`, ... side by side: the inputs of a drafter with
`fused_hidden_state_ids`, see hf_dynaspec.modeling.config). Caching the top-k instead of the full distribution is what
makes the drafter's loss affordable: training never needs the target, and its head only over a few rows. A finished shard is never
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

from hf_dynaspec.loading import load_target
from recipes.conversations import conversations, self_distilled, tokenize
from recipes.user_data import add_data_arguments


def shard_path(out: Path, index: int) -> Path:
    return out / f"shard_{index:05d}.safetensors"


@torch.no_grad()
def next_token_topk(model, hidden: torch.Tensor, k: int, rows_per_chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's top-k next tokens `[N, k]` (int32) and their full-softmax log-probs `[N, k]` (fp32).

    `hidden` is `[N, D]`; the head runs in chunks so that `[N, V]` logits never exist at once.
    """
    ids, logps = [], []
    head = model.lm_head.weight
    for chunk in hidden.split(rows_per_chunk):
        logp = model.lm_head(chunk.to(device=head.device, dtype=head.dtype)).float().log_softmax(-1)
        top = logp.topk(k, dim=-1)
        ids.append(top.indices.to(torch.int32).cpu())  # shards are written from the CPU
        logps.append(top.values.cpu())
    return torch.cat(ids), torch.cat(logps)


@torch.no_grad()
def target_hidden(model, sequences: list[list[int]], fused_ids: list[int] | None = None):
    """Post-norm last hidden states `[T_i, D]` (model dtype) of each sequence (one right-padded batch).

    With `fused_ids`, returns (last, fused) lists, fused `[T_i, n*D]` holding `hidden_states[i]` for each i.
    """
    length = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    mask = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    device = model.get_input_embeddings().weight.device
    out = model.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                      output_hidden_states=list(fused_ids) if fused_ids else None)
    hidden = out.last_hidden_state.cpu()  # shards are written from the CPU
    last = [hidden[row, : len(seq)].clone() for row, seq in enumerate(sequences)]
    if not fused_ids:
        return last
    fused = torch.cat([out.hidden_states[i].cpu() for i in fused_ids], dim=-1)
    return last, [fused[row, : len(seq)].clone() for row, seq in enumerate(sequences)]


def shard_tensors(model, tokenized: list[tuple[list[int], int]], topk: int, tokens_per_batch: int,
                  on_tokens=lambda n: None, fused_ids: list[int] | None = None) -> dict[str, torch.Tensor]:
    """The tensors of one shard (see the module docstring) for (ids, response start) pairs.

    Sequences run in length-sorted, right-padded batches of at most `tokens_per_batch` padded tokens.
    """
    order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i][0]))
    hidden: list[torch.Tensor | None] = [None] * len(tokenized)
    fused: list[torch.Tensor | None] = [None] * len(tokenized)
    batch: list[int] = []
    for i in order + [None]:
        longest = max([len(tokenized[j][0]) for j in batch] + ([len(tokenized[i][0])] if i is not None else [0]))
        if batch and (i is None or longest * (len(batch) + 1) > tokens_per_batch):
            out = target_hidden(model, [tokenized[j][0] for j in batch], fused_ids)
            last, extra = out if fused_ids else (out, [None] * len(batch))
            for j, h, f in zip(batch, last, extra):
                hidden[j], fused[j] = h, f
            on_tokens(sum(len(tokenized[j][0]) for j in batch))
            batch = []
        if i is not None:
            batch.append(i)
    return pack_shard(model, tokenized, hidden, topk, fused if fused_ids else None)


def pack_shard(model, tokenized: list[tuple[list[int], int]], hidden: list[torch.Tensor], topk: int,
               fused: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Shard tensors from (ids, response start) pairs and each sequence's post-norm hidden states `[T_i, D]`
    (and, optionally, its fused-layer states `[T_i, n*D]`); the top-k next tokens are computed here from the
    hidden states through the target's head."""
    top = [next_token_topk(model, h, topk) for h in hidden]
    tensors = {
        "input_ids": torch.cat([torch.tensor(t, dtype=torch.int32) for t, _ in tokenized]),
        "hidden": torch.cat([h.to(torch.bfloat16) for h in hidden]),
        "topk_ids": torch.cat([ids for ids, _ in top]),
        "topk_logp": torch.cat([logp for _, logp in top]),
        "response_mask": torch.cat([torch.arange(len(t)) >= start for t, start in tokenized]),
        "offsets": torch.tensor([0] + list(itertools.accumulate(len(t) for t, _ in tokenized)), dtype=torch.int64),
    }
    if fused is not None:
        tensors["fused_hidden"] = torch.cat([f.to(torch.bfloat16) for f in fused])
    return tensors


def parse_layer_ids(text: str | None) -> list[int] | None:
    """"2,12,21" -> [2, 12, 21] (indices into the target's hidden_states); None or "" -> None."""
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise SystemExit(f"--fused-hidden-states takes comma-separated integers (e.g. 2,12,21), got {text!r}") from None


def check_resumable(out: Path, meta: dict) -> None:
    """Refuse to resume into `out` when its finished shards came from other conversations or another first file
    (shard i is the i-th chunk of the stream, so kept shards would silently stand for the wrong sequences), or
    hold other fused hidden states (a directory whose shards disagree on them could not train one drafter)."""
    if not shard_path(out, 0).exists() or not (out / "meta.json").is_file():
        return
    old = json.loads((out / "meta.json").read_text())
    for key, default in (("conversations", None), ("first_file", 0), ("fused_hidden_state_ids", None)):
        if old.get(key, default) != meta.get(key, default):
            raise SystemExit(f"{out} holds shards built with {key}={old.get(key, default)!r}, not {meta.get(key, default)!r}: "
                             "give this run its own --out (or delete the old shards)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-tokens", type=int, default=1_000_000, help="stop after this many tokens in all")
    parser.add_argument("--max-length", type=int, default=512, help="truncate conversations to this many tokens")
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--sequences-per-shard", type=int, default=256)
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                        help="fp16 on GPUs without bf16 (a T4); fp32 on CPUs without native bf16 (AVX2)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    parser.add_argument("--topk", type=int, default=16, help="next-token candidates kept per position")
    parser.add_argument("--conversations", type=Path, default=None,
                        help="responses written by recipes.self_distill (default: the provided responses)")
    parser.add_argument("--first-file", type=int, default=0,
                        help="with --conversations: read responses_NNNNN.jsonl from this file number on; shard 0 "
                             "of --out then starts at that file (give each file range its own --out)")
    parser.add_argument("--last-file", type=int, default=None, help="with --conversations: the last file to read")
    parser.add_argument("--fused-hidden-states", default=None, metavar="I,J,...",
                        help="also keep the target's hidden_states[I], [J], ... (0 = embedding output, i = input of "
                             "layer i) for a drafter that fuses them (train_drafter --fused-hidden-states)")
    add_data_arguments(parser)
    args = parser.parse_args(argv)
    fused_ids = parse_layer_ids(args.fused_hidden_states)
    if args.data and args.conversations:
        parser.error("--data (provided responses) and --conversations (self-distilled answers) exclude each other")
    if (args.first_file or args.last_file is not None) and args.conversations is None:
        parser.error("--first-file/--last-file select self-distilled files: they need --conversations")

    meta = {"target": args.target, "max_length": args.max_length, "dtype": args.dtype, "topk": args.topk,
            "conversations": str(args.conversations) if args.conversations else "provided responses",
            **({"data": args.data, "split": args.split} if args.data else {}),
            "first_file": args.first_file, "last_file": args.last_file, "fused_hidden_state_ids": fused_ids}
    check_resumable(args.out, meta)
    # fp32: on CPUs without native bf16 matmuls (AVX2) a bf16 prefill is ~6x slower (benchmarks/results).
    model, tokenizer = load_target(args.target, args.dtype, args.device)
    if fused_ids and max(fused_ids) > model.config.get_text_config().num_hidden_layers:
        raise SystemExit(f"--fused-hidden-states {fused_ids}: the target has only "
                         f"{model.config.get_text_config().num_hidden_layers} layers (indices 0..that number)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "meta.json").write_text(json.dumps(meta))
    pairs = (self_distilled(args.conversations, args.first_file, args.last_file) if args.conversations
             else conversations(args.data, args.split))
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
        tensors = shard_tensors(model, tokenized, args.topk, args.tokens_per_batch, progress.update, fused_ids)
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp))
        tmp.rename(path)
        total_tokens += tokens_in_shard
        shard_index += 1
    progress.close()
    print(f"{shard_index} shards, {total_tokens} tokens in {args.out}")


if __name__ == "__main__":
    main()
