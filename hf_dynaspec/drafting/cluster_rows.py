"""The row budget's shortlist as head row ids, and as blocks of the permuted head: the same rows either way.

A step scores the first R rows of the router's ranking (drafting/budget.py): clusters whole in the router's
order, the last one cut, each cluster's tokens most frequent first (`VocabClusters.frequency_ordered`, done
once at load, so a cut keeps a prefix of the cluster). The columns are the ranked clusters' rows end to end, cut
after R, then the always-included ids (ties in the argmax go to the better-ranked cluster).

- `ClusterRowTable` (accelerators): the cluster tables on the device; `scores` takes the ranking `[C]` to the
  scores of R + A columns, a fixed shape set by R alone, so a step reads nothing back to the host, compiles to
  one graph per R and scores no padding (columns = real rows; before the row budget, the list was sized for the
  k largest clusters: 2.5-4.3x the real rows). On CUDA with Triton that is one kernel launch, row ids included
  (kernels/shortlist_head); elsewhere the ids in a few torch ops and a gather.
- `block_ranges` (CPU): the same rows as `[start, end)` ranges of the cluster-permuted head, in the same order.

Legend: C clusters, A always-included ids, R the step's row budget, B hidden rows, H hidden size.
"""

from __future__ import annotations

import torch

from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput, ranked_head_for
from hf_dynaspec.kernels.shortlist_head.reference import ranked_row_ids
from hf_dynaspec.modeling.shortlist.clustering import VocabClusters


def _check_host(clusters: VocabClusters) -> None:
    if any(t.device.type != "cpu" for t in (clusters.token_order, clusters.offsets, clusters.always_ids)):
        raise ValueError("the row tables are built from the clusters' CPU copies (shortlists.host_clusters())")


class ClusterRowTable:
    """Built once per runtime head from the frequency-ordered clusters' host copies, then moved to `device` as
    finished tensors: building it never reads a device value, and never mixes a device tensor with a CPU one.
    The backend (`ranked_head_for`) is chosen here too, once: a step never asks."""

    def __init__(self, clusters: VocabClusters, device: torch.device, head_weight: torch.Tensor | None = None):
        _check_host(clusters)
        self.num_clusters = clusters.num_clusters
        self.num_always = len(clusters.always_ids)
        self.num_clustered = len(clusters.token_order)
        self.sizes = clusters.offsets.diff().to(device)  # [C]
        self.starts = clusters.offsets[:-1].to(device)  # [C]: cluster c's first row in token_order
        self.token_order = clusters.token_order.to(device)  # [V - A]
        self.always_ids = clusters.always_ids.to(device)  # [A]
        self._columns = torch.arange(self.num_clustered, device=device)  # sliced to R per step
        self._head = ranked_head_for(head_weight) if head_weight is not None else None

    def _tables(self) -> tuple[torch.Tensor, ...]:
        return self.sizes, self.starts, self.token_order, self.always_ids

    def row_ids(self, ranking: torch.Tensor, rows: int) -> torch.Tensor:
        """Clusters ranked best first `[C]` (a device tensor) and the budget R (host int, at most the clustered
        rows) -> head row ids `[R + A]`, the columns' order. No host read: every shape is set by R."""
        return ranked_row_ids(ranking, *self._tables(), self._columns[:rows])

    def scores(self, hidden: torch.Tensor, head_weight: torch.Tensor, ranking: torch.Tensor,
               rows: int) -> ShortlistHeadOutput:
        """Hidden `[B, H]`, the head `[V, H]` the table was built for, the ranking `[C]` and R -> the output of
        the R + A columns `row_ids` names (scores `[B, R + A]`, ids, fused reductions on the Triton path)."""
        if self._head is None:
            raise ValueError("this ClusterRowTable was built without the head: pass head_weight= to score with it")
        return self._head(hidden, head_weight, ranking, *self._tables(), self._columns[:rows])


def block_ranges(ranking: list[int], rows: int, offsets: list[int]) -> tuple[list[int], list[int]]:
    """The CPU form of `ClusterRowTable.row_ids`: ranking (host list of every cluster, best first), R and the
    clusters' `offsets` -> (starts, ends) of the taken prefixes in the permuted head, in ranking order."""
    taken: dict[int, int] = {}
    left = rows
    for cluster in ranking:
        size = offsets[cluster + 1] - offsets[cluster]
        taken[cluster] = min(size, left)
        left -= taken[cluster]
        if left == 0:
            break
    chosen = [c for c in taken if taken[c]]  # ranking order (dicts keep insertion order)
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
