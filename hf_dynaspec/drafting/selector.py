"""Runtime shortlists: which LM-head rows the drafter scores at each draft position.

One head is built per assistant and drafting options (drafting/runtime.py caches it) from the artifact and the
target's LM head. Every head's `scores` returns a `ShortlistHeadOutput` (scores, target ids of the columns,
argmax / max / log-sum-exp, fused where a kernel computes them) and keeps every value on the head's device:
a draft step never waits on an accelerator.

- `StaticHead`: every row (the EAGLE baseline), or a fixed list (FR-Spec, VocabTrim), its rows gathered once into a
  contiguous copy;
- `ClusterHead`: DynaSpec with a row budget R(t) (`RowBudget`, issue 63): the router ranks every cluster; a step
  scores the first R(t) rows of that ranking, clusters whole in the router's order, each cluster's tokens most
  frequent first and the last one cut, then the always-included ids (ties in the argmax go to the better-ranked
  cluster). Early draft tokens are the likeliest accepted, so they get the widest shortlist; a fixed row count
  means a step's shape never depends on the router's choice. R(t) is `shortlist_rows` (per position, the last for
  every later one), or for "clusters" (artifacts saved before the row budget) the paper's cluster budget k(t)
  times the rows the next token's cluster holds on average.
  On CPU the rows are `[start, end)` blocks of a cluster-permuted copy of the head (`block_ranges`: the measured
  fast path; host-side lists cost nothing there). On accelerators `ClusterRowTable` turns the ranking `[C]` into
  exactly R(t) + A row ids on the device, a shape set by R alone: no host read, one compiled graph per R, no
  padding (on CUDA with Triton one kernel launch from the ranking to the top token).

Legend: H hidden, V target vocab, S shortlist size, C clusters, A always-included ids, R a step's row budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hf_dynaspec.drafting.device_paths import use_accelerator_paths
from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput, ranked_head_for, shortlist_head
from hf_dynaspec.kernels.shortlist_head.torch_paths import ranked_row_ids
from hf_dynaspec.kernels.streams import Pending, SideStream
from hf_dynaspec.modeling.shortlist.clustering import VocabClusters


def clusters_at_position(position: int, max_clusters: int) -> int:
    """k(t): `max_clusters` for draft positions 0 and 1, then floor(k_max / ((t + 1) * 2)), at least 1."""
    if position < 0 or max_clusters < 1:
        raise ValueError(f"need position >= 0 and max_clusters >= 1, got {position}, {max_clusters}")
    if position <= 1:
        return max_clusters
    return max(1, max_clusters // ((position + 1) * 2))


class RowBudget:
    """R(t) per draft position: `rows[t]`, the last entry for later positions (host ints, fixed for a head)."""

    def __init__(self, rows: Sequence[int]):
        if not rows or any(not isinstance(r, int) or r < 1 for r in rows):
            raise ValueError(f"a row budget is a non-empty list of positive ints, got {list(rows)!r}")
        self.rows = tuple(rows)

    def at(self, position: int) -> int:
        return self.rows[min(position, len(self.rows) - 1)]

    def __repr__(self) -> str:
        return f"RowBudget({list(self.rows)})"


def row_budget(strategy: str, options, clustered_rows: int, num_always: int, rows_per_cluster: float) -> RowBudget:
    """The R(t) of `strategy` ("dynaspec": per position; "dynaspec-fixed": R(0) at every position) under the
    drafting `options` (`shortlist_rows`, or with "clusters" `max_clusters` / `fixed_clusters` times `rows_per_cluster`), each
    at most the `clustered_rows` there are and, with `max_shortlist_size`, what the cap leaves after the
    `num_always` always-included rows (at least one row)."""
    stored = options.shortlist_rows
    if stored != "clusters":
        rows = [stored] if isinstance(stored, int) else list(stored)
    elif strategy == "dynaspec":
        rows, position = [], 0
        while not rows or clusters_at_position(position - 1, options.max_clusters) > 1:
            rows.append(round(clusters_at_position(position, options.max_clusters) * rows_per_cluster))
            position += 1
    else:
        rows = [round(options.fixed_clusters * rows_per_cluster)]
    if strategy == "dynaspec-fixed":
        rows = rows[:1]
    limit = clustered_rows
    if options.max_shortlist_size is not None:
        limit = min(limit, max(1, options.max_shortlist_size - num_always))
    return RowBudget([max(1, min(int(r), limit)) for r in rows])



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


class StaticHead:
    """A fixed list of the head's rows: FR-Spec / VocabTrim's `token_ids` (plus the always-included ones), gathered
    once into a contiguous copy when the head is built; None: every row (the EAGLE baseline)."""

    def __init__(self, head_weight: torch.Tensor, token_ids: torch.Tensor | None = None):
        self.token_ids = token_ids
        self.weight = head_weight if token_ids is None else head_weight[token_ids].contiguous()
        self.min_rows = self.weight.shape[0]

    def choose_clusters(self, token_embed=None, prev_hidden=None, position: int = 0, inline: bool = False):
        return None

    def scores(self, hidden: torch.Tensor, clusters=None) -> ShortlistHeadOutput:
        """Hidden `[R, H]` -> scores `[R, S]` (S = V for every row)."""
        return ShortlistHeadOutput((hidden @ self.weight.T).float(), self.token_ids)


class ClusterHead:
    """DynaSpec: the router ranks the clusters; the first `budget.at(t)` rows of its ranking are scored
    (`RowBudget`, `ClusterRowTable`), plus the always-included rows.

    `indexed` (default: drafting/device_paths.py) picks the device-side form (see the module docstring). Both
    forms score the same rows in the same column order (tests/test_shortlists.py).
    """

    def __init__(self, head_weight, shortlists, budget: RowBudget, indexed: bool | None = None):
        host = shortlists.host_buffers()
        # Each cluster's tokens most frequent first: a budget that cuts a cluster keeps its likeliest rows.
        clusters = shortlists.host_clusters().frequency_ordered(host["frequency_ids"])
        self.router = shortlists.router
        self.budget = budget
        self.always_ids = clusters.always_ids.to(head_weight.device)
        self.side_stream = SideStream(head_weight.device)
        self.indexed = use_accelerator_paths(head_weight.device) if indexed is None else indexed
        self.min_rows = min(budget.rows) + len(self.always_ids)
        if self.indexed:
            self.head_weight = head_weight
            self.rows = ClusterRowTable(clusters, head_weight.device, head_weight)  # picks its backend once
        else:
            self.offsets = clusters.offsets.tolist()
            # Clustered rows cluster by cluster, then the always-included rows as one final block.
            self.token_order = torch.cat([clusters.token_order, clusters.always_ids]).to(head_weight.device)
            self.num_clustered = len(clusters.token_order)
            self.permuted_weight = head_weight[self.token_order].contiguous()

    def choose_clusters(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int,
                        inline: bool = False) -> tuple[torch.Tensor | Pending, int]:
        """Start the router on this step's inputs `[R, D]`, `[R, H]` (before the drafter's layer runs): on the
        side stream where there is one (its scores `Pending`), else, or with `inline` (a captured draft:
        drafting/captured.py), here (the scores themselves)."""
        if inline or self.side_stream.stream is None:
            return self.router(token_embed, prev_hidden), position
        return self.side_stream.launch(self.router, token_embed, prev_hidden), position

    @staticmethod
    def ranking(cluster_scores: torch.Tensor) -> torch.Tensor:
        """Router scores `[R, C]` -> every cluster, best first `[C]` (on the scores' device; ties by index). With
        several rows (the nodes of one tree depth, scored together) clusters are ranked by mean probability."""
        ranking = cluster_scores[0] if cluster_scores.shape[0] == 1 else cluster_scores.softmax(-1).mean(0)
        return ranking.argsort(descending=True, stable=True)

    def _blocks(self, cluster_scores: torch.Tensor, position: int) -> tuple[list[int], list[int]]:
        """The CPU form's row blocks of the permuted head at `position`, the always-included block last."""
        starts, ends = block_ranges(self.ranking(cluster_scores).tolist(), self.budget.at(position), self.offsets)
        return starts + [self.num_clustered], ends + [self.num_clustered + len(self.always_ids)]

    @torch.no_grad()
    def shortlist_ids(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> torch.Tensor:
        """Target ids `[R(t) + A]` of the shortlist at `position`, without scoring it (for measurements), in the
        column order `scores` uses."""
        cluster_scores = self.router(token_embed, prev_hidden)
        if self.indexed:
            return self.rows.row_ids(self.ranking(cluster_scores), self.budget.at(position))
        starts, ends = self._blocks(cluster_scores, position)
        return torch.cat([self.token_order[a:b] for a, b in zip(starts, ends)])

    @torch.no_grad()
    def scores(self, hidden: torch.Tensor, clusters: tuple[torch.Tensor | Pending, int]) -> ShortlistHeadOutput:
        """Hidden `[R, H]` and the clusters the router chose for this step (`choose_clusters`: its scores, or pending
        on the side stream; the draft position) -> scores `[R, R(t) + A]` of the budget's rows."""
        cluster_scores, position = clusters
        if isinstance(cluster_scores, Pending):
            cluster_scores = cluster_scores.result()
        if self.indexed:
            return self.rows.scores(hidden, self.head_weight, self.ranking(cluster_scores), self.budget.at(position))
        starts, ends = self._blocks(cluster_scores, position)
        return shortlist_head(hidden, self.permuted_weight, starts, ends, self.token_order)


def build_head(strategy: str, head_weight: torch.Tensor, shortlists, options, indexed: bool | None = None):
    """The runtime head for `strategy` ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed").

    `options`: the drafting options (`DynaSpecGenerationConfig`: shortlist_size, shortlist_rows, max_clusters,
    fixed_clusters, max_shortlist_size). Inference only: the head weights are detached (training uses the modules, not these heads).
    """
    head_weight = head_weight.detach()
    if strategy == "full":
        return StaticHead(head_weight)
    if strategy in ("frspec", "vocabtrim"):
        ids = shortlists.static_list(strategy, options.shortlist_size)
        if ids is None:
            raise ValueError(
                f"shortlist={strategy!r} needs a frequency list in the artifact; this one has none. Build it with "
                f"assistant.shortlists.set_frequency_list(ids, kind={strategy!r}) (see recipes)."
            )
        return StaticHead(head_weight, ids)
    if strategy in ("dynaspec", "dynaspec-fixed"):
        if shortlists.clusters is None:
            raise ValueError(
                f"shortlist={strategy!r} needs vocabulary clusters and a router in the artifact; this one has none. "
                "Build them with assistant.shortlists.set_clusters(cluster_vocabulary(head, C)) and train the router."
            )
        host = shortlists.host_buffers()
        clusters = shortlists.host_clusters()
        budget = row_budget(strategy, options, len(clusters.token_order), len(clusters.always_ids),
                            clusters.expected_rows_per_cluster(host["frequency_ids"]))
        return ClusterHead(head_weight, shortlists, budget, indexed)
    raise ValueError(f"unknown shortlist strategy {strategy!r}")
