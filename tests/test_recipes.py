"""Training recipes on tiny models: the drafter objective learns, and the router objective learns."""

from __future__ import annotations

import torch

from conftest import VOCAB, one_layer_target
from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.shortlist import ClusterRouter
from recipes.train_drafter import drafter_loss, pad


def test_drafter_objective_fits_a_batch_and_raises_acceptance():
    target = one_layer_target("qwen2", seed=6)
    target.requires_grad_(False)
    assistant = DynaSpecAssistant.from_target(target)
    generator = torch.Generator().manual_seed(0)
    batch = [(torch.randint(0, VOCAB, (40,), generator=generator).tolist(), 5) for _ in range(4)]
    ids, attention_mask, loss_mask = pad(batch)
    optimizer = torch.optim.AdamW(assistant.drafter.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        loss, metrics = drafter_loss(assistant, target, ids, attention_mask, loss_mask, noise=0.0, cls_weight=1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = first if first is not None else metrics
    # The drafter's distribution approaches the target's (KL, above the entropy floor) and its argmax agrees.
    assert metrics["kl"] < 0.3 * first["kl"] and metrics["reg"] < first["reg"]
    assert metrics["top1"] > max(0.5, 5 * first["top1"]), (first, metrics)
    assert metrics["tokens"] == sum(len(seq) - 1 - start for seq, start in batch)


def test_router_objective_learns_a_learnable_mapping():
    torch.manual_seed(0)
    router = ClusterRouter(8, 8, num_clusters=5, router_hidden_size=32)
    embeds, hidden = torch.randn(512, 8), torch.randn(512, 8)
    labels = (embeds[:, 0] > 0).long() * 2 + (hidden[:, 1] > 0).long()  # 4 of 5 clusters used
    optimizer = torch.optim.Adam(router.parameters(), lr=1e-2)
    before = ClusterRouter.top_k_recall(router(embeds, hidden), labels, 1)
    for _ in range(200):
        loss = ClusterRouter.loss(router(embeds, hidden), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert ClusterRouter.top_k_recall(router(embeds, hidden), labels, 1) > max(0.9, before)
    labels[:10] = -1  # always-included tokens carry no cluster label and are ignored
    assert torch.isfinite(ClusterRouter.loss(router(embeds, hidden), labels))
