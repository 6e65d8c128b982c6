"""Train Medusa heads from cached target features (recipes/build_features.py), on CPU or through accelerate.

    python -m recipes.train_medusa --target qwen2.5-coder-0.5b-instruct --features outputs/features/qwen05-medusa \
        --out outputs/medusa-05b --heads 4 --layers 1 --epochs 2 --frequency-list-size 32768

The heads read the target's post-norm last hidden state h_t (what the shards cache) and never the target itself,
so training is the heads alone: far cheaper than the EAGLE layer. Head k learns the token k + 2 steps ahead: its
teacher is the target's own next-token distribution at position t + k + 1 (the shards' top-k, renormalised),
scored through the target's LM head over the sampled rows (the teacher's top-k plus random rows), the
Medusa-1 loss with weight `decay^k` per head. Only positions whose teacher token is a response token count.
`--frequency-list-size S` stores the S most frequent response tokens of the features with the heads (their
FR-Spec shortlist, `shortlist="frspec"`). Checkpoints (`checkpoint/`: accelerate state and the step) are
written every `--checkpoint-every` steps; a run started again with the same --out resumes from the last one.

Legend: K heads, N positions, D target hidden, V vocabulary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from hf_dynaspec.loading import load_target
from hf_dynaspec.modeling.medusa import MedusaAssistant
from recipes.training_data import Sequence, feature_shards, make_batches, split_held_out
from recipes.training_objective import classification_loss, sampled_rows

try:
    from accelerate import Accelerator
except ImportError as error:  # pragma: no cover - the [train] extra
    raise ImportError("training Medusa heads needs accelerate: pip install 'hf-dynaspec[train]'") from error


def head_pairs(sequences: list[Sequence], head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For head `head` (0-based): (source rows, teacher rows) `[N]` into the sequences concatenated: source t
    reads h_t, its teacher is the top-k at t + head + 1 (the target's distribution of token t + head + 2),
    where that position's next token is a response token."""
    sources, teachers, offset = [], [], 0
    for sequence in sequences:
        length = len(sequence.input_ids)
        shift = head + 1
        if length > shift + 1:
            t = torch.arange(length - shift - 1)
            keep = sequence.response[t + shift + 1]
            sources.append(offset + t[keep])
            teachers.append(offset + t[keep] + shift)
        offset += length
    if not sources:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    return torch.cat(sources), torch.cat(teachers)


def medusa_loss(heads: MedusaAssistant, head_weight: torch.Tensor, sequences: list[Sequence], *, decay: float,
                negatives: int, generator: torch.Generator | None) -> tuple[torch.Tensor, list[float]]:
    """The Medusa-1 loss of `sequences`: sum over heads of decay^k x cross-entropy against the teacher top-k
    -> (loss, top-1 agreement per head)."""
    hidden = torch.cat([s.hidden for s in sequences]).to(head_weight.device, torch.float32)
    topk_ids = torch.cat([s.topk_ids for s in sequences]).long().to(head_weight.device)
    topk_logp = torch.cat([s.topk_logp for s in sequences]).float().to(head_weight.device)
    total, agreements = hidden.new_zeros(()), []
    for k, block in enumerate(heads.blocks):
        source, teacher = head_pairs(sequences, k)
        if not source.numel():
            agreements.append(0.0)
            continue
        predicted = block(hidden[source.to(hidden.device)])
        teacher = teacher.to(hidden.device)
        rows = None if generator is None else sampled_rows(
            topk_ids[teacher], torch.ones(len(teacher), dtype=torch.bool, device=hidden.device), negatives,
            head_weight.shape[0], generator)
        loss, agree = classification_loss(predicted, head_weight, rows, topk_ids[teacher], topk_logp[teacher])
        total = total + decay**k * loss
        agreements.append(float(agree))
    return total, agreements


def frequency_list(sequences: list[Sequence], size: int) -> torch.Tensor:
    """The `size` most frequent response tokens of the features `[S]` (ties: lower id first), sorted by id."""
    ids = torch.cat([s.input_ids[s.response].long() for s in sequences])
    counts = torch.bincount(ids)
    return torch.sort(torch.topk(counts, min(size, counts.numel())).indices).values


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--features", nargs="+", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--decay", type=float, default=0.8, help="loss weight decay per head (Medusa-1: 0.8)")
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--negatives", type=int, default=4096, help="random head rows per step (0: full head)")
    parser.add_argument("--val-tokens", type=int, default=4000)
    parser.add_argument("--frequency-list-size", type=int, default=32768)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> MedusaAssistant:
    args = parse_arguments(argv)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    target, _ = load_target(args.target, "fp32")
    held_out, train = split_held_out(feature_shards(args.features), args.val_tokens)
    heads = MedusaAssistant.from_target(target, num_heads=args.heads, num_layers=args.layers)
    if args.frequency_list_size:
        ids = frequency_list(train, args.frequency_list_size)
        heads.config.frequency_list_size = len(ids)
        heads.frequency_ids = ids
    head_weight = target.get_output_embeddings().weight.detach().to(accelerator.device)
    del target
    optimizer = torch.optim.AdamW(heads.blocks.parameters(), lr=args.lr, weight_decay=0.0)
    # On one process prepare returns the module itself (multi-process gradient sync would need the wrapped module).
    _, optimizer = accelerator.prepare(heads.blocks, optimizer)
    batches = [b for epoch in range(int(-(-args.epochs // 1)))
               for b in make_batches(train, args.tokens_per_batch, args.seed + epoch)]
    batches = batches[: int(len(batches) * args.epochs / max(1, -(-args.epochs // 1)))]
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint, log = args.out / "checkpoint", args.out / "train_log.jsonl"
    first = json.loads((checkpoint / "step.json").read_text())["step"] if (checkpoint / "step.json").is_file() else 0
    if first:
        accelerator.load_state(str(checkpoint))
        accelerator.print(f"resumed at step {first}")
    generator = torch.Generator().manual_seed(args.seed + first)
    started = time.time()
    for step in range(first, len(batches)):
        for group in optimizer.param_groups:  # linear decay to 10%
            group["lr"] = args.lr * (1 - 0.9 * step / len(batches))
        loss, agree = medusa_loss(heads, head_weight, batches[step], decay=args.decay, negatives=args.negatives,
                                  generator=generator if args.negatives else None)
        if loss.requires_grad:  # a batch with no response position past every head's offset trains nothing
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
        record = {"step": step + 1, "loss": round(float(loss), 4), "agree": [round(a, 3) for a in agree],
                  "seconds": round(time.time() - started, 1)}
        if (step + 1) % args.checkpoint_every == 0 or step + 1 == len(batches):
            with torch.no_grad():
                _, val = medusa_loss(heads, head_weight, held_out, decay=args.decay, negatives=0, generator=None)
            record["val_agree"] = [round(a, 3) for a in val]
            accelerator.save_state(str(checkpoint))
            (checkpoint / "step.json").write_text(json.dumps({"step": step + 1}))
            heads.save_pretrained(args.out / "heads")
        with log.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        accelerator.print(record)
    heads.card_data = {"training": {
        "features": [str(path) for path in args.features], "training tokens": sum(len(s.input_ids) for s in train),
        "steps": len(batches), "heads": args.heads, "layers": args.layers, "learning rate": args.lr,
        "loss": f"Medusa-1, weight {args.decay}^k per head, sampled rows (+{args.negatives} random)",
        "command": "python -m recipes.train_medusa " + " ".join(sys.argv[1:] if argv is None else argv)}}
    heads.save_pretrained(args.out / "heads")
    return heads


if __name__ == "__main__":
    main()
