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
    assert metrics["tokens"] == sum(len(seq) - start for seq, start in batch)  # response positions after the first token


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


def test_vocabtrim_ranking_counts_the_drafters_own_tokens(monkeypatch):
    import recipes.build_shortlists as build
    from conftest import imitating_assistant

    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.3, num_draft_tokens=3)
    prompts = [torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    monkeypatch.setattr(build, "conversations", lambda: iter([("p", "r")] * 3))
    monkeypatch.setattr("hf_dynaspec.runner.encode_prompt", lambda tokenizer, text, chat: prompts.pop())
    drafted = []
    original = assistant.make_candidate_generator

    def spy(*args, **kwargs):  # remember each call's drafts to recount them independently
        generator = original(*args, **kwargs)
        drafted.append(assistant.stats)
        return generator

    monkeypatch.setattr(assistant, "make_candidate_generator", spy)
    ranking = build.vocabtrim_ranking(assistant, target, None, num_prompts=3, max_new_tokens=12)
    all_drafts = torch.cat([t for stats in drafted for t in stats.draft_token_ids])
    assert len(all_drafts) == sum(stats.drafted for stats in drafted) > 0
    counts = torch.bincount(all_drafts, minlength=VOCAB)
    assert set(ranking.tolist()) == set(counts.nonzero().flatten().tolist())
    assert (counts[ranking].diff() <= 0).all()  # most drafted first
    assert not assistant.collect_draft_tokens
