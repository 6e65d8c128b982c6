"""The drafter's training objective (EAGLE-1 with a sampled-row classification loss; see recipes/train_drafter.py
for the whole recipe) and `DrafterLoss`, the module accelerate prepares.

Legend: B batch, T tokens, H hidden, V target vocabulary.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from hf_dynaspec.modeling.drafter import causal_mask
from recipes.training_data import Batch


def drafter_features(drafter, batch: Batch) -> torch.Tensor:
    """The drafter's features of the batch's verified positions `[B, T, H]` in the drafter's dtype: the target's
    last hidden state, or for a fused drafter `fuse([fused states ; last hidden state])` (the order of
    Drafter.select_target_hidden)."""
    target_features = batch.hidden
    if drafter.config.fused_hidden_state_ids:
        if batch.fused is None:
            raise ValueError("this drafter fuses target layers: its batches need the shards' fused_hidden states")
        target_features = torch.cat([batch.fused, batch.hidden], dim=-1)
    return drafter.fuse_target_hidden(target_features.to(drafter.fc.weight.dtype))


def draft_pass(drafter, token_embeds: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """One drafter pass over whole sequences: pairs (E(x_{t+1}), f_t) `[B, T-1, ...]` -> predicted f_{t+1}."""
    length = features.shape[1]
    positions = torch.arange(length, device=features.device)[None]
    return drafter.step(token_embeds, features, positions, None, causal_mask(length, 0, features.device))


def sampled_rows(topk_ids: torch.Tensor, mask: torch.Tensor, negatives: int, vocab: int, generator) -> torch.Tensor:
    """The head rows a loss needs: the union of the target's top-k at the loss positions plus random rows."""
    wanted = topk_ids[mask].flatten()
    if negatives:
        random_rows = torch.randint(0, vocab, (negatives,), generator=generator).to(wanted.device)
        wanted = torch.cat([wanted, random_rows])
    return wanted.unique()


def classification_loss(predicted: torch.Tensor, head_weight: torch.Tensor, rows: torch.Tensor | None,
                        topk_ids: torch.Tensor, topk_logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the target's top-k (renormalised) under the drafter's softmax over `rows`.

    predicted `[N, D]` (normed drafter output), topk `[N, k]`; `rows` None means the full head.
    Returns (loss, top-1 agreement within the rows scored).
    """
    weight = head_weight if rows is None else head_weight[rows]
    logp = (predicted @ weight.T).float().log_softmax(-1)  # [N, R]
    columns = topk_ids if rows is None else torch.searchsorted(rows, topk_ids)
    teacher = topk_logp.softmax(-1)  # renormalised over the top-k
    loss = -(teacher * logp.gather(-1, columns)).sum(-1).mean()
    agree = (logp.argmax(-1) == columns[:, 0]).float().mean()
    return loss, agree


def drafter_loss(drafter, batch: Batch, *, noise: float, cls_weight: float, unroll: int, negatives: int,
                 generator, reg_weight: float = 1.0, teacher_top_k: int | None = None) -> tuple[torch.Tensor, dict]:
    """EAGLE loss over a batch (all valid positions; see the module docstring). `teacher_top_k`: the target's
    distribution renormalised over its k most likely tokens (1: its argmax alone; None: all the shards keep).
    Returns (loss, metrics)."""
    features = batch.hidden
    mask = batch.valid[:, 1:] & batch.valid[:, :-1]  # pair t: inputs f_t and x_{t+1}, labels at t+1
    embeds = drafter.embed(batch.input_ids[:, 1:])
    inputs = drafter_features(drafter, batch)[:, :-1]
    if noise:
        inputs = inputs + (torch.rand(inputs.shape, generator=generator).to(inputs) * 2 - 1) * noise * inputs.abs().mean()
    head = drafter.target.lm_head.weight
    rows = sampled_rows(batch.topk_ids[:, 1:], mask, negatives, head.shape[0], generator) if negatives >= 0 else None
    total, metrics = 0.0, {"batch_tokens": int(mask.sum())}
    predicted = draft_pass(drafter, embeds, inputs)
    for depth in range(1, unroll + 1):
        if depth > 1:
            # Step `depth` consumes the previous step's own predictions: pair t now holds (E(x_{t+d}), p_{t+d-1}).
            embeds, predicted, mask = embeds[:, 1:], draft_pass(drafter, embeds[:, 1:], predicted[:, :-1]), mask[:, 1:] & mask[:, :-1]
        target = features[:, depth:]
        regression = F.smooth_l1_loss(predicted[mask], target[mask])
        cls, agree = classification_loss(predicted[mask], head, rows, batch.topk_ids[:, depth:][mask][:, :teacher_top_k],
                                         batch.topk_logp[:, depth:][mask][:, :teacher_top_k])
        total = total + reg_weight * regression + cls_weight * cls
        metrics.update({f"reg{depth}": regression.item(), f"cls{depth}": cls.item(), f"top1_{depth}": agree.item()})
    metrics["rows"] = head.shape[0] if rows is None else len(rows)
    return total / unroll, metrics


class DrafterLoss(torch.nn.Module):
    """The drafter with its training loss as `forward`: the module accelerate prepares. Under several processes
    accelerate wraps it in DistributedDataParallel, whose forward is what arms the gradient all-reduce: a loss
    computed beside the wrapper (through `unwrap_model`) trains every rank on its own batches and the ranks
    drift apart (tests/test_training_schedule.py trains on two processes and compares them)."""

    def __init__(self, drafter, args: argparse.Namespace):
        super().__init__()
        self.drafter = drafter
        self.options = dict(noise=args.noise, cls_weight=args.cls_weight, unroll=args.unroll,
                            negatives=args.negatives, reg_weight=args.reg_weight, teacher_top_k=args.teacher_top_k)

    def forward(self, batch: Batch, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        return drafter_loss(self.drafter, batch, generator=generator, **self.options)
