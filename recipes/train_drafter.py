"""Train an EAGLE drafter from cached target features (recipes/build_features.py), with accelerate.

    python -m recipes.train_drafter --target qwen2.5-coder-0.5b-instruct \
        --features outputs/features/qwen05-sd outputs/features/qwen05 --out outputs/drafter-05b --epochs 2

Objective (EAGLE-1): at every pair (E(x_{t+1}), f_t) the drafter predicts f_{t+1}: `--reg-weight` x smooth-L1 to
the target's feature plus `--cls-weight` x cross-entropy between the target's next-token distribution after
x_{t+1} and the drafter's, through the frozen LM head; inputs get uniform noise as in EAGLE. With `--unroll 2`
the drafter also takes one step on its own predictions (EAGLE-3's training-time test, simplified to whole
sequences), which is what it does from the second draft position on.

Fused features: with `--fused-hidden-states I,J,..` (shards built with the same option) the drafter's feature
of a verified position is `fuse([rms(h_I) ; rms(h_J) ; .. ; f])` instead of `f` (see hf_dynaspec.modeling.config); regression
targets stay the post-norm `f`. Added to an `--init` drafter, `fuse` starts as a pass-through of `f`.

Sampled-row loss: the shards keep the target's top-k next tokens, so the loss needs the head only over the
union of the batch's top-k ids plus `--negatives` uniformly sampled rows (a few thousand rows instead of
151,936). The target's distribution is the top-k renormalised (`--teacher-top-k 1`: its argmax alone). Validation always uses the full head:
top-1 agreement of the drafter's full-vocabulary argmax with the target's, at draft position 1 and (on its
own features) position 2.

Runs with `accelerate launch` unchanged on GPUs (bf16 autocast there); on CPU it trains in fp32, because on
AVX2 CPUs bf16 matmuls are ~6x slower than fp32 (benchmarks/results/step_costs_05b.json). Checkpoints
(`checkpoint/`: accelerate state + position in the data) are written every `--checkpoint-every` steps and
resumed automatically; `assistant/` always holds the latest weights as a loadable artifact.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

try:
    from accelerate import Accelerator
except ImportError as error:  # a training-time dependency (pyproject's `train` extra)
    raise ImportError("training a drafter needs accelerate: pip install 'hf-dynaspec[train]'") from error
from safetensors import safe_open
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.loading import load_target
from recipes.build_features import parse_layer_ids
from recipes.training_data import Batch, BatchSchedule, collate, feature_shards, make_batches, split_held_out
from recipes.training_objective import DrafterLoss, draft_pass, drafter_features
from recipes.training_schedule import (
    parse_token_counts,
    start_from_snapshot,
    take_snapshot,
    training_precision,
    wsd_factor,
)


# -- validation ------------------------------------------------------------------------------------
def teacher_forced_passes(drafter, batch: Batch, depths: int) -> list[torch.Tensor]:
    """The drafter's predicted features at draft positions 1 .. `depths` over whole sequences: pass d `[B, T-d, H]`
    (index t: the round whose last accepted token is x_{t+1}) runs on pass d-1's predictions, with the true tokens
    as the drafted ones (equal to them wherever the earlier drafts were accepted)."""
    embeds = drafter.embed(batch.input_ids[:, 1:])
    passes = [draft_pass(drafter, embeds, drafter_features(drafter, batch)[:, :-1])]
    for depth in range(1, depths):
        passes.append(draft_pass(drafter, embeds[:, depth:], passes[-1][:, :-1]))
    return passes


def head_top1(features: torch.Tensor, head: torch.Tensor, rows_per_chunk: int = 512) -> torch.Tensor:
    """Full-vocabulary argmax of `features` [N, H] through the LM head [V, H] -> [N], a chunk of rows at a time (the
    [N, V] logits of a whole batch would take gigabytes at 150k-token vocabularies)."""
    return torch.cat([(rows @ head.T).argmax(-1) for rows in features.split(rows_per_chunk)])


@torch.no_grad()
def validate(drafter, batches: list[Batch], depths: int = 2, answers_only: bool = False) -> dict:
    """Full-vocabulary top-1 agreement with the target at draft positions 1 .. `depths` (no noise), over every
    position (`val_top1_d`) and over response positions only (`val_response_top1_d`, what decoding sees:
    the chat template's fixed system prompt is easy to predict and flatters the first). Position d > 1 runs on
    the drafter's own predicted features, as drafting does (teacher-forced tokens). `answers_only` scores response
    positions only (the full head over long prompts costs most of the time; `val_top1_d` then equals the response's)."""
    hits = {key: [0] * depths for key in ("all", "response")}
    counts = {key: [0] * depths for key in ("all", "response")}
    head = drafter.target.lm_head.weight
    for batch in batches:
        mask = batch.valid[:, 1:] & batch.valid[:, :-1]
        masks = [mask]
        for _ in range(1, depths):  # pass d pairs positions whose d earlier pairs are valid too
            masks.append(masks[-1][:, 1:] & masks[-1][:, :-1])
        for depth, (predicted, m) in enumerate(zip(teacher_forced_passes(drafter, batch, depths), masks)):
            if answers_only:
                m = m & batch.response[:, depth + 1:]
            top = head_top1(predicted[m], head)
            hit = top == batch.topk_ids[:, depth + 1:][m][:, 0]
            in_response = batch.response[:, depth + 1:][m]  # the label row lies in the response
            hits["all"][depth] += int(hit.sum())
            counts["all"][depth] += len(hit)
            hits["response"][depth] += int(hit[in_response].sum())
            counts["response"][depth] += int(in_response.sum())
    metrics = {}
    for depth in range(depths):
        metrics[f"val_top1_{depth + 1}"] = hits["all"][depth] / max(counts["all"][depth], 1)
        metrics[f"val_response_top1_{depth + 1}"] = hits["response"][depth] / max(counts["response"][depth], 1)
    return metrics


# -- checkpoints -----------------------------------------------------------------------------------------
def resume_from(accelerator: Accelerator, checkpoint: Path, model: torch.nn.Module) -> None:
    """`accelerator.load_state`, tolerating only the tensors that safetensors cannot keep.

    safetensors saves one of several empty tensors (they look like views of one null storage), so an
    assistant's unused, empty shortlist buffers go missing from the checkpoint and a strict load refuses it.
    Anything else missing is an error.
    """
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
        saved = set(f.keys())
    state = accelerator.unwrap_model(model).state_dict()
    lost = sorted(key for key in state if key not in saved and state[key].numel())
    if lost:
        raise RuntimeError(f"checkpoint {checkpoint} does not hold {lost[:5]} ({len(lost)} tensors): it belongs "
                           "to another model; delete it, or pass another --out, to start over")
    accelerator.load_state(str(checkpoint), strict=False)


# -- loop ------------------------------------------------------------------------------------------------
def restore_progress(accelerator: Accelerator, model, checkpoint: Path, log: Path, snapshot: Path | None,
                     done: dict) -> None:
    """Resume from `checkpoint` (seeded from `snapshot` when there is none yet) into the prepared objects and `done`."""
    progress_file = checkpoint / "progress.json"
    if not progress_file.exists() and snapshot is not None:
        if accelerator.is_main_process:
            start_from_snapshot(snapshot, checkpoint)
        accelerator.wait_for_everyone()
    if not progress_file.exists():
        return
    resume_from(accelerator, checkpoint, model)
    done.update(json.loads(progress_file.read_text()))
    if accelerator.is_main_process and log.exists():  # steps after the checkpoint are done again: log them once
        kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= done["step"]]
        log.write_text("".join(line + "\n" for line in kept))
    accelerator.print(f"resuming at step {done['step']} ({done['tokens']} tokens)")


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--features", required=True, type=Path, nargs="+",
                        help="recipes.build_features output directories or single shard files; validation comes from "
                             "the first; a shard named twice trains once")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--init", default=None, help="assistant to start from (default: fresh from the target)")
    parser.add_argument("--intermediate-size", type=int, default=None,
                        help="a fresh drafter's MLP width (default: the target's); narrower keeps the target's "
                             "most important channels and makes a smaller artifact")
    parser.add_argument("--fused-hidden-states", default=None, metavar="I,J,...",
                        help="make the drafter fuse the target's hidden_states[I], [J], ... with its last hidden "
                             "state (features built with the same build_features option); with --init, on top "
                             "of the initial drafter, starting as a pass-through")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--cls-weight", type=float, default=1.0)
    parser.add_argument("--reg-weight", type=float, default=1.0,
                        help="weight of the feature regression (EAGLE-1/2 use 1; EAGLE-3 drops it, 0)")
    parser.add_argument("--teacher-top-k", type=int, default=None,
                        help="learn the target's distribution over its k most likely next tokens, renormalised (1: "
                             "its argmax alone; default: all the shards keep, --topk of build_features)")
    parser.add_argument("--unroll", type=int, default=1, help="drafter steps per position (2 = training-time test)")
    parser.add_argument("--negatives", type=int, default=4096,
                        help="random head rows per batch in the sampled loss; -1 = full-vocabulary loss")
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--validate-every", type=int, default=50)
    parser.add_argument("--val-tokens", type=int, default=2000,
                        help="held-out tokens (the first sequences of the first shard)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (for trials)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="stop once this many training tokens were seen (instead of --epochs / --max-steps)")
    parser.add_argument("--schedule", choices=["cosine", "wsd"], default="cosine",
                        help="cosine over the run's steps, or warmup-stable-decay: constant after the warmup, then "
                             "linear to 0 over the last --decay-tokens of --max-tokens (a data curve's branches)")
    parser.add_argument("--decay-tokens", type=int, default=0, help="wsd: tokens of the final decay (0: constant)")
    parser.add_argument("--snapshot-at-tokens", default="",
                        help="comma-separated token counts: when the run first reaches each, a copy of the whole "
                             "training state goes to OUT/snapshots/tokens_N (to branch from with --resume-from)")
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a snapshot directory to start from when OUT holds no checkpoint yet")
    parser.add_argument("--mixed-precision", choices=["auto", "no", "bf16", "fp16"], default="auto",
                        help="auto: bf16 on GPUs and on CPUs that multiply bf16 natively (avx512_bf16 / AMX), "
                             "fp32 on other CPUs (AVX2 runs bf16 products ~6x slower)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.init and args.intermediate_size:
        parser.error("--intermediate-size applies to a fresh drafter; --init keeps the initial assistant's width")
    if args.schedule == "wsd" and args.max_tokens is None:
        parser.error("--schedule wsd decays towards --max-tokens: give it")
    if args.decay_tokens and args.schedule != "wsd":
        parser.error("--decay-tokens belongs to --schedule wsd")
    return args


def place_borrowed_parts(target, device: torch.device):
    """Move only what training reads of the target to `device`: the embedding, the final norm and the LM head
    the drafter borrows. The decoder layers stay where they are (the features are cached: training never runs
    them), so a GPU holds the drafter and three of the target's modules, not the whole model in fp32."""
    decoder = target.get_decoder()
    for module in {id(m): m for m in (target.get_input_embeddings(), decoder.norm,
                                      target.get_output_embeddings())}.values():
        module.to(device)
    return target


def make_assistant(args: argparse.Namespace, target) -> DynaSpecAssistant:
    """The drafter to train: `--init`'s (with feature fusion added when asked) or a fresh one from the target."""
    fused_ids = parse_layer_ids(args.fused_hidden_states)
    overrides = {"intermediate_size": args.intermediate_size} if args.intermediate_size else {}
    if args.init:
        assistant = DynaSpecAssistant.from_pretrained(args.init, target=target)
        if fused_ids and assistant.config.fused_hidden_state_ids != fused_ids:
            assistant.add_feature_fusion(fused_ids)
    else:
        assistant = DynaSpecAssistant.from_target(target, target_name_or_path=args.target,
                                                  **overrides, **({"fused_hidden_state_ids": fused_ids} if fused_ids else {}))
    return assistant


def train_step(args, accelerator, model, optimizer, scheduler, batch: Batch, done: dict, generator):
    """One optimizer step of the prepared `DrafterLoss` on `batch`; advances `done` (step, tokens). Returns (loss,
    metrics, the step's rate)."""
    # Noise and sampled rows from a generator seeded by the step: a resumed run or a branch from a snapshot draws
    # exactly what the uninterrupted run would have drawn.
    generator.manual_seed(args.seed * 1_000_003 + done["step"])
    # (accelerate's autocast wraps the prepared forward; entered here too, so that the precision never depends on
    # how accelerate wrapped it.)
    with accelerator.autocast():
        loss, metrics = model(batch, generator)
    if scheduler is None:
        for group in optimizer.param_groups:
            group["lr"] = args.lr * wsd_factor(done["step"], done["tokens"], args.warmup_steps, args.max_tokens,
                                               args.decay_tokens)
    rate = optimizer.param_groups[0]["lr"]  # this step's
    optimizer.zero_grad()
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    done["step"] += 1
    done["tokens"] += metrics["batch_tokens"]
    if scheduler is not None:
        scheduler.step()
    return loss, metrics, rate


def main(argv=None) -> DynaSpecAssistant:
    """Train; returns the trained assistant (this process's copy)."""
    args = parse_arguments(argv)
    snapshot_tokens = parse_token_counts(args.snapshot_at_tokens)

    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              mixed_precision=training_precision(args.mixed_precision))
    target, _ = load_target(args.target, "fp32")
    # The drafter borrows the target's embedding, final norm and LM head (not submodules: accelerate's prepare
    # does not move them), so those go where the drafter will train, before the assistant attaches to it.
    target = place_borrowed_parts(target.requires_grad_(False), accelerator.device)
    assistant = make_assistant(args, target)
    fused_ids = assistant.config.fused_hidden_state_ids  # an --init drafter may fuse already
    # The full-head validation is costly: it is kept to --val-tokens.
    held_out, train_sequences = split_held_out(feature_shards(args.features, fused_ids), args.val_tokens,
                                               fused=bool(fused_ids))
    val_batches = [collate(b, accelerator.device) for b in make_batches(held_out, args.tokens_per_batch, 0)]
    tokens_per_epoch = sum(len(s.input_ids) - 1 for s in train_sequences)
    schedule = BatchSchedule(train_sequences, args.tokens_per_batch, args.seed, accelerator.num_processes)
    total_steps = args.max_steps or (schedule.total_steps(args.epochs) if args.max_tokens is None
                                     else schedule.steps_for_tokens(args.max_tokens))
    done = {"step": 0, "tokens": 0, "seconds": 0.0}

    optimizer = torch.optim.AdamW(assistant.drafter.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    # wsd sets the rate before each step from the step and the tokens seen (no scheduler state: a branch from a
    # snapshot gets exactly the straight run's rates); cosine is transformers' scheduler.
    scheduler = None if args.schedule == "wsd" else get_cosine_schedule_with_warmup(optimizer, args.warmup_steps,
                                                                                     total_steps)
    model, optimizer, *prepared_scheduler = accelerator.prepare(DrafterLoss(assistant.drafter, args), optimizer,
                                                                *([scheduler] if scheduler else []))
    scheduler = prepared_scheduler[0] if prepared_scheduler else None
    drafter = assistant.drafter  # the very module `model` trains (wrapped or not)

    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint, log = args.out / "checkpoint", args.out / "train_log.jsonl"
    progress_file = checkpoint / "progress.json"
    restore_progress(accelerator, model, checkpoint, log, args.resume_from, done)
    accelerator.print(f"{len(train_sequences)} sequences, {tokens_per_epoch} tokens per epoch, {total_steps} steps; "
                      f"validation: {sum(int(b.valid.sum()) for b in val_batches)} tokens")

    def save():
        # Every rank enters save_state (accelerate writes the shared files from the main process and each rank its
        # own random state); the files of this script are written once, by the main process.
        accelerator.wait_for_everyone()
        accelerator.save_state(str(checkpoint))
        if accelerator.is_main_process:
            progress_file.write_text(json.dumps(done))
            assistant.save_pretrained(args.out / "assistant")
        accelerator.wait_for_everyone()

    if done["step"] == 0 and accelerator.is_main_process:  # the starting point, so that a log shows the gain
        with log.open("a") as f:
            f.write(json.dumps({**done, **validate(drafter, val_batches)}) + "\n")
    bar = tqdm(total=total_steps, initial=done["step"], unit="step", desc="drafter")
    generator = torch.Generator()
    start, seconds_before = time.perf_counter(), done["seconds"]
    while done["step"] < total_steps and (args.max_tokens is None or done["tokens"] < args.max_tokens):
        batch = collate(schedule.batch(done["step"], accelerator.process_index), accelerator.device)
        loss, metrics, rate = train_step(args, accelerator, model, optimizer, scheduler, batch, done, generator)
        done["seconds"] = seconds_before + time.perf_counter() - start
        record = {**done, **metrics, "loss": loss.item(), "lr": rate}
        finished = done["step"] == total_steps or (args.max_tokens is not None and done["tokens"] >= args.max_tokens)
        if done["step"] % args.validate_every == 0 or finished:
            record.update(validate(drafter, val_batches))
            accelerator.print(json.dumps({k: record[k] for k in ("step", "tokens", "val_top1_1", "val_top1_2",
                                                                 "val_response_top1_1", "val_response_top1_2")}))
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", top1=f"{metrics['top1_1']:.2f}",
                        tok_s=f"{done['tokens'] / max(done['seconds'], 1e-9):.0f}")
        if accelerator.is_main_process:
            with log.open("a") as f:
                f.write(json.dumps(record) + "\n")
        if done["step"] % args.checkpoint_every == 0:
            save()
        reached = [t for t in snapshot_tokens if done["tokens"] - metrics["batch_tokens"] < t <= done["tokens"]]
        if reached:
            save()
            for tokens in reached:
                if accelerator.is_main_process:
                    take_snapshot(checkpoint, args.out / "snapshots" / f"tokens_{tokens}")
            accelerator.wait_for_everyone()
    save()
    bar.close()
    return assistant


if __name__ == "__main__":
    main()
