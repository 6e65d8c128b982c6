"""Would a row budget keep DynaSpec's coverage? An offline look before changing what the shortlist is.

Today a DynaSpec step scores the k(t) clusters the router ranks first; on a device its columns must be fixed
before the choice, so they are bounded by the k largest clusters (4-5x the real rows: docs/gpu.md). A row
budget would score exactly R(t) rows instead: clusters in the router's order, the last one cut, tokens inside a
cluster taken most frequent first (the artifact's FR-Spec ranking). This script runs greedy generation with the
shipped assistant (drafter only) and, at every draft step, compares the target's committed token's coverage
under both rules, with R(t) set to today's mean real rows at that draft position (equal mean cost).
Coverage only: tau needs the rule in the drafting loop itself. (benchmarks/shortlist_coverage.py measures
coverage with the target's own features as the router's input; this records the drafter's real steps.)

    python benchmarks/row_budget_coverage.py --target qwen2.5-coder-0.5b-instruct \\
        --assistant assistants/qwen2.5-coder-0.5b-instruct --json benchmarks/results/row_budget_coverage_05b.json
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import torch
from shortlist_columns import generate_drafter_only, parse_arguments, write_result

from hf_dynaspec.drafting.selector import ClusterHead
from hf_dynaspec.stats import DraftStats


def within_cluster_order(clusters, frequency_ids: torch.Tensor) -> list[list[int]]:
    """Each cluster's token ids, most frequent first (ranked ids by rank, the rest by id)."""
    rank = {int(t): r for r, t in enumerate(frequency_ids.tolist())}
    offsets, order = clusters.offsets.tolist(), clusters.token_order.tolist()
    return [sorted(order[a:b], key=lambda t: (rank.get(t, len(rank)), t)) for a, b in zip(offsets, offsets[1:])]


def row_budget_ids(ranking: list[int], ordered: list[list[int]], budget: int) -> set[int]:
    ids: list[int] = []
    for cluster in ranking:
        ids.extend(ordered[cluster][: budget - len(ids)])
        if len(ids) >= budget:
            break
    return set(ids)


def main(argv=None) -> dict:
    args = parse_arguments(argv, __doc__.split("\n\n")[0])
    pending: list[tuple[list[int], list[int]]] = []  # (router ranking, chosen clusters) of each scored step
    steps: list[tuple[int, list[int], list[int], int]] = []  # (position, ranking, chosen, committed token)
    original_clusters_from, original_record = ClusterHead._clusters_from, DraftStats.record_shortlists

    def clusters_from(self, cluster_scores, position):
        chosen = original_clusters_from(self, cluster_scores, position)
        pending.append((cluster_scores[0].float().argsort(descending=True).tolist(), chosen))
        return chosen

    def record_shortlists(self, shortlist_ids, target_tokens):
        # One call per round, for the steps scored since the last one (draft positions 0, 1, ...).
        scored, pending[:] = pending[: len(shortlist_ids)], pending[len(shortlist_ids):]
        for position, (ranking, chosen) in enumerate(scored[: len(target_tokens)]):
            steps.append((position, ranking, chosen, int(target_tokens[position])))
        return original_record(self, shortlist_ids, target_tokens)

    ClusterHead._clusters_from, DraftStats.record_shortlists = clusters_from, record_shortlists
    assistant, _ = generate_drafter_only(args, before_each_prompt=pending.clear)

    clusters = assistant.shortlists.host_clusters()
    always = set(clusters.always_ids.tolist())
    offsets, order = clusters.offsets.tolist(), clusters.token_order.tolist()
    ordered = within_cluster_order(clusters, assistant.shortlists.host_buffers()["frequency_ids"])
    members = [set(order[a:b]) for a, b in zip(offsets, offsets[1:])]
    rows_at = defaultdict(list)
    for position, _, chosen, _ in steps:
        rows_at[position].append(sum(len(members[c]) for c in chosen))
    budget = {p: round(statistics.fmean(r)) for p, r in rows_at.items()}
    hits_now, hits_budget = defaultdict(list), defaultdict(list)
    for position, ranking, chosen, token in steps:
        hits_now[position].append(token in always or any(token in members[c] for c in chosen))
        hits_budget[position].append(token in always or token in row_budget_ids(ranking, ordered, budget[position]))
    result = {"target": args.target, "assistant": args.assistant, "max_new_tokens": args.max_new_tokens,
              "steps": len(steps), "always_included": len(always),
              "per_position": {p: {"steps": len(hits_now[p]), "row_budget": budget[p],
                                   "coverage_clusters": statistics.fmean(hits_now[p]),
                                   "coverage_row_budget": statistics.fmean(hits_budget[p])} for p in sorted(budget)},
              "coverage_clusters": statistics.fmean([h for p in hits_now for h in hits_now[p]]),
              "coverage_row_budget": statistics.fmean([h for p in hits_budget for h in hits_budget[p]])}
    return write_result(result, args.json)


if __name__ == "__main__":
    main()
