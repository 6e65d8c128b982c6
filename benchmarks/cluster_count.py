"""How many vocabulary clusters? Coverage at equal shortlist size for several C, one set of router data.

    python benchmarks/cluster_count.py --target qwen2.5-coder-0.5b-instruct --clusters 64,256,1024 \
        --router-tokens 8000 --budget-rows 19000 --json benchmarks/results/cluster_count_05b.json

Router data (E(x_t), f_{t-1}, the target's greedy next token) is collected once from the training
conversations; for each C the vocabulary is clustered, a router trained on 90% and evaluated on the held-out
10%: for each held-out position the top-scored clusters are added until the shortlist reaches
`--budget-rows` rows, and coverage is whether the target's token is inside. Also reports clustering time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.modeling.shortlist import ClusterRouter, cluster_vocabulary
from recipes.build_shortlists import always_included_ids, router_examples, train_router


def coverage_at_budget(router, clusters, embeds, feats, next_ids, budget_rows):
    sizes = clusters.offsets.diff()
    labels = clusters.cluster_of_token(len(clusters.token_order) + len(clusters.always_ids))
    with torch.no_grad():
        order = router(embeds, feats).argsort(-1, descending=True)  # [N, C]
    cumulative = sizes[order].cumsum(-1)  # rows after taking the top-j clusters
    taken = cumulative <= budget_rows
    taken[:, 0] = True  # at least the best cluster
    rows = (sizes[order] * taken).sum(-1).float()
    token_cluster = labels[next_ids]
    always = token_cluster < 0
    hit = ((order == token_cluster[:, None]) & taken).any(-1) | always
    return hit.float().mean().item(), rows.mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--clusters", default="64,256,1024")
    parser.add_argument("--router-tokens", type=int, default=8000)
    parser.add_argument("--budget-rows", type=int, default=19000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, tokenizer = load_target(args.target, "fp32")
    vocab = model.get_output_embeddings().weight.shape[0]
    # With the identity as "cluster of token", the labels router_examples returns are the next token ids.
    embeds, feats, next_ids = router_examples(model, tokenizer, torch.arange(vocab), args.router_tokens)
    # train_router(seed=0) holds out the first tenth of this same permutation.
    held_out = torch.randperm(len(next_ids), generator=torch.Generator().manual_seed(0))[: len(next_ids) // 10]
    head = model.get_output_embeddings().weight.detach()
    always = always_included_ids(tokenizer, model)
    results = {}
    for num_clusters in [int(c) for c in args.clusters.split(",")]:
        start = time.perf_counter()
        clusters = cluster_vocabulary(head, num_clusters, always_ids=always, seed=0)
        cluster_seconds = time.perf_counter() - start
        labels = clusters.cluster_of_token(vocab)[next_ids]
        router = ClusterRouter(head.shape[1], head.shape[1], clusters.num_clusters)
        metrics = train_router(router, embeds, feats, labels, seed=0)  # same seed: same held-out split
        coverage, rows = coverage_at_budget(router, clusters, embeds[held_out], feats[held_out], next_ids[held_out], args.budget_rows)
        sizes = clusters.offsets.diff().float()
        results[num_clusters] = {"cluster_seconds": cluster_seconds, "coverage_at_budget": coverage,
                                 "avg_rows": rows, "largest_cluster": sizes.max().item(),
                                 "median_cluster": sizes.median().item(), **metrics}
        print(num_clusters, json.dumps(results[num_clusters]), flush=True)
    out = {"target": args.target, "router_tokens": args.router_tokens, "budget_rows": args.budget_rows, "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
