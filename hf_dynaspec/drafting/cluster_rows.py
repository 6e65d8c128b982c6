"""The row budget's shortlist as head row ids, and as blocks of the permuted head: the same rows either way.

A step scores the first R rows of the router's ranking (drafting/budget.py): clusters whole in the router's
order, the last one cut, each cluster's tokens most frequent first (`VocabClusters.frequency_ordered`, done
once at load, so a cut keeps a prefix of the cluster). Laid out in cluster order, what a step scores from
cluster c is a prefix `take[c]` of its rows, where `take[c] = clamp(R - rows ranked ahead of c, 0, size[c])`;
the columns are those prefixes end to end, then the always-included ids.

- `ClusterRowTable.row_ids` (accelerators): the ranking `[C]` -> ids `[R + A]`, a fixed shape set by R alone,
  so a step reads nothing back to the host, compiles to one graph per R and scores no padding (columns = real
  rows; before the row budget, the list was sized for the k largest clusters: 2.5-4.3x the real rows).
- `block_ranges` (CPU): the same prefixes as `[start, end)` row ranges of the cluster-permuted head, read by
  the block kernel front to back.

Legend: C clusters, A always-included ids, R the step's row budget.
"""

from __future__ import annotations

import torch

from hf_dynaspec.modeling.shortlist.clustering import VocabClusters


def _check_host(clusters: VocabClusters) -> None:
    if any(t.device.type != "cpu" for t in (clusters.token_order, clusters.offsets, clusters.always_ids)):
        raise ValueError("the row tables are built from the clusters' CPU copies (shortlists.host_clusters())")


class ClusterRowTable:
    """Built once per runtime head from the frequency-ordered clusters' host copies, then moved to `device` as
    finished tensors: building it never reads a device value, and never mixes a device tensor with a CPU one."""

    def __init__(self, clusters: VocabClusters, device: torch.device):
        _check_host(clusters)
        sizes = clusters.offsets.diff()
        self.num_clusters = clusters.num_clusters
        self.num_always = len(clusters.always_ids)
        self.num_clustered = len(clusters.token_order)
        self.sizes = sizes.to(device)  # [C]
        self.starts = clusters.offsets[:-1].to(device)  # [C]: cluster c's first row in token_order
        self.token_order = clusters.token_order.to(device)  # [V - A]
        self.always_ids = clusters.always_ids.to(device)  # [A]
        self._columns = torch.arange(self.num_clustered, device=device)  # sliced to R per step

    def takes(self, ranking: torch.Tensor, rows: int) -> torch.Tensor:
        """Clusters ranked best first `[C]` (every cluster once) -> rows taken from each cluster `[C]`, in cluster
        order: whole clusters while the budget lasts, then the remainder of `rows` from the next, then none."""
        ranked_sizes = self.sizes[ranking]
        ahead_ranked = ranked_sizes.cumsum(0) - ranked_sizes  # rows of the clusters ranked before each
        ahead = torch.empty_like(ahead_ranked).scatter_(0, ranking, ahead_ranked)  # back in cluster order
        return (rows - ahead).clamp(min=0).minimum(self.sizes)

    def row_ids(self, ranking: torch.Tensor, rows: int) -> torch.Tensor:
        """Clusters ranked best first `[C]` (a device tensor) and the budget R (host int, at most the clustered
        rows) -> head row ids `[R + A]`: each cluster's taken prefix in cluster order, then the always-included
        ids. No host read: every shape is set by R."""
        take = self.takes(ranking, rows)
        ends = take.cumsum(0)  # [C]: where each cluster's columns end
        columns = self._columns[:rows]  # [R]
        which = torch.searchsorted(ends, columns, right=True)  # [R]: the cluster each column comes from
        source = self.starts[which] + columns - (ends - take)[which]
        return torch.cat([self.token_order[source], self.always_ids])


def block_ranges(ranking: list[int], rows: int, offsets: list[int]) -> tuple[list[int], list[int]]:
    """The CPU form of `ClusterRowTable.row_ids`: ranking (host list of every cluster, best first), R and the
    clusters' `offsets` -> (starts, ends) of the taken prefixes in the permuted head, in cluster order."""
    taken: dict[int, int] = {}
    left = rows
    for cluster in ranking:
        size = offsets[cluster + 1] - offsets[cluster]
        taken[cluster] = min(size, left)
        left -= taken[cluster]
        if left == 0:
            break
    chosen = sorted(taken)
    return [offsets[c] for c in chosen], [offsets[c] + taken[c] for c in chosen]


def row_places(cluster_scores: torch.Tensor, tokens: torch.Tensor, clusters: VocabClusters) -> torch.Tensor:
    """Where each example's token lies in its step's row order, for coverage at any row budget at once.

    `cluster_scores` [N, C] (router scores; a row budget ranks clusters as `ClusterHead.ranking` does), `tokens`
    [N] (e.g. the target's next tokens), `clusters` frequency-ordered as at load -> `[N]` int64: the number of
    rows the rule takes before the token's own, so a budget R scores the token iff place < R; -1 for an
    always-included token (scored at every budget). The same rule as `ClusterRowTable.row_ids`, batched."""
    _check_host(clusters)
    vocab_size = len(clusters.token_order) + len(clusters.always_ids)
    cluster_of = clusters.cluster_of_token(vocab_size)  # [V]
    token_cluster = cluster_of[tokens]  # [N]
    within = torch.empty(vocab_size, dtype=torch.long)  # a token's place inside its (frequency-ordered) cluster
    order = clusters.token_order
    within[order] = torch.arange(len(order)) - clusters.offsets[cluster_of[order]]
    ranking = cluster_scores.float().argsort(dim=-1, descending=True, stable=True)  # [N, C]
    ranked_sizes = clusters.offsets.diff()[ranking]
    ahead = torch.empty_like(ranking).scatter_(1, ranking, ranked_sizes.cumsum(-1) - ranked_sizes)  # cluster order
    always = token_cluster < 0
    place = ahead.gather(1, token_cluster.clamp(min=0)[:, None]).squeeze(1) + within[tokens]
    return torch.where(always, torch.full_like(place, -1), place)
