"""Train an EAGLE drafter for a target, online (target features computed per batch), with accelerate.

    python -m recipes.train_drafter --target qwen2.5-coder-0.5b-instruct --out outputs/drafter-05b \
        --max-tokens 200000 --tokens-per-batch 2048

Objective (EAGLE-1): at every pair (E(x_{t+1}), f_t) the drafter predicts f_{t+1}: smooth-L1 to the target's
feature plus `--cls-weight` x cross-entropy between the target's next-token distribution (softmax of its
logits at t+1) and the drafter's, through the frozen LM head; inputs get uniform noise as in EAGLE. Loss
positions are the response tokens. The full-vocabulary head is used in the loss (the top-k / sampled-row
loss of the recipes issue is not implemented yet).

Runs with `accelerate launch` unchanged on GPUs; on CPU it trains in fp32 (bf16 matmuls are ~6x slower on
AVX2 CPUs, benchmarks/results/step_costs_05b.json). Checkpoints (`checkpoint/`, accelerate state + position
in the data stream) are written every `--checkpoint-every` steps and resumed automatically.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from tqdm.auto import tqdm

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafter import causal_mask
from hf_dynaspec.runner import load_target
from recipes.conversations import conversations, tokenize


def batches(tokenizer, max_length: int, tokens_per_batch: int, skip: int = 0):
    """Lists of (ids, response_start), about `tokens_per_batch` padded tokens each; the first `skip` dropped."""
    stream = (tokenize(tokenizer, p, r, max_length) for p, r in conversations())
    batch, longest = [], 0
    for index, item in enumerate(stream):
        if index < skip:
            continue
        longest = max(longest, len(item[0]))
        batch.append(item)
        if longest * len(batch) >= tokens_per_batch:
            yield batch
            batch, longest = [], 0


def pad(batch):
    """Right-padded `ids`, `attention_mask` and `loss_mask` (response tokens), each `[B, T]`."""
    length = max(len(ids) for ids, _ in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    attention_mask = torch.zeros(len(batch), length, dtype=torch.long)
    loss_mask = torch.zeros(len(batch), length, dtype=torch.bool)
    for row, (seq, start) in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        attention_mask[row, : len(seq)] = 1
        loss_mask[row, start : len(seq)] = True
    return ids, attention_mask, loss_mask


def drafter_loss(assistant, target, ids, attention_mask, loss_mask, noise: float, cls_weight: float):
    """EAGLE loss over a right-padded batch `[B, T]`; returns (loss, metrics)."""
    with torch.no_grad():
        out = target(input_ids=ids, attention_mask=attention_mask, output_hidden_states=-1)
        features = out.hidden_states[-1]  # [B, T, D] post-norm
        target_logp = out.logits.float().log_softmax(-1)  # [B, T, V]
    drafter = assistant.drafter
    inputs = features[:, :-1]
    inputs = inputs + (torch.rand_like(inputs) * 2 - 1) * noise * inputs.abs().mean()
    embeds = drafter.embed(ids[:, 1:])
    positions = torch.arange(ids.shape[1] - 1)[None]
    predicted = drafter.step(embeds, inputs, positions, None, causal_mask(ids.shape[1] - 1, 0, ids.device))
    mask = loss_mask[:, 1:]  # pair t predicts f_{t+1} and the token after x_{t+1}
    regression = F.smooth_l1_loss(predicted[mask], features[:, 1:][mask])
    logits = drafter.target.lm_head(predicted[mask]).float()
    p = target_logp[:, 1:][mask].exp()
    classification = -(p * logits.log_softmax(-1)).sum(-1).mean()
    entropy = -(p * target_logp[:, 1:][mask]).sum(-1).mean()  # the floor of `classification`
    agree = (logits.argmax(-1) == p.argmax(-1)).float().mean()
    return regression + cls_weight * classification, {
        "reg": regression.item(), "cls": classification.item(), "top1": agree.item(), "kl": (classification - entropy).item(),
        "tokens": int(mask.sum())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--init", default=None, help="assistant to start from (default: fresh from the target)")
    parser.add_argument("--max-tokens", type=int, default=200_000)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--cls-weight", type=float, default=0.1)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args = parser.parse_args(argv)

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    dtype = "fp32" if accelerator.device.type == "cpu" else "bf16"
    target, tokenizer = load_target(args.target, dtype)
    target.requires_grad_(False)
    assistant = (DynaSpecAssistant.from_pretrained(args.init, target=target) if args.init
                 else DynaSpecAssistant.from_target(target, target_name_or_path=args.target))
    optimizer = torch.optim.AdamW(assistant.drafter.parameters(), lr=args.lr, weight_decay=0.0)
    assistant, optimizer = accelerator.prepare(assistant, optimizer)
    checkpoint = args.out / "checkpoint"
    progress_file = checkpoint / "progress.json"
    done = {"step": 0, "sequences": 0, "tokens": 0}
    if progress_file.exists():
        accelerator.load_state(str(checkpoint))
        done = json.loads(progress_file.read_text())
        accelerator.print(f"resuming at step {done['step']} ({done['tokens']} tokens)")
    bar = tqdm(total=args.max_tokens, initial=done["tokens"], unit="tok", desc="drafter")
    log = (args.out / "train_log.jsonl")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for batch in batches(tokenizer, args.max_length, args.tokens_per_batch, skip=done["sequences"]):
        if done["tokens"] >= args.max_tokens:
            break
        ids, attention_mask, loss_mask = pad(batch)
        loss, metrics = drafter_loss(assistant, target, ids, attention_mask, loss_mask, args.noise, args.cls_weight)
        optimizer.zero_grad()
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(assistant.parameters(), 0.5)
        optimizer.step()
        done["step"] += 1
        done["sequences"] += len(batch)
        done["tokens"] += metrics["tokens"]
        bar.update(metrics["tokens"])
        bar.set_postfix(loss=f"{loss.item():.3f}", top1=f"{metrics['top1']:.2f}")
        with log.open("a") as f:
            f.write(json.dumps({**done, **metrics, "loss": loss.item(), "seconds": time.perf_counter() - start}) + "\n")
        if done["step"] % args.checkpoint_every == 0:
            accelerator.save_state(str(checkpoint))
            progress_file.write_text(json.dumps(done))
            accelerator.unwrap_model(assistant).save_pretrained(args.out / "assistant")
    accelerator.save_state(str(checkpoint))
    progress_file.write_text(json.dumps(done))
    accelerator.unwrap_model(assistant).save_pretrained(args.out / "assistant")
    bar.close()


if __name__ == "__main__":
    main()
