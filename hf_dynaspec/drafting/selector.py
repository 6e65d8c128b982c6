"""Runtime shortlists: which LM-head rows the drafter scores at each draft position.

One head is built per assistant and drafting options (drafting/runtime.py caches it) from the artifact and the
target's LM head. Every head's `scores` returns a `ShortlistHeadOutput` (scores, target ids of the columns,
argmax / max / log-sum-exp, fused where a kernel computes them) and keeps every value on the head's device:
a draft step never waits on an accelerator.

- `FullHead`: every row (the EAGLE baseline);
- `StaticHead`: a fixed list (FR-Spec, VocabTrim), its rows gathered once into a contiguous copy;
- `ClusterHead`: DynaSpec with a row budget R(t). On CPU it reads contiguous blocks of a cluster-permuted copy of
  the head (the measured fast path; host-side lists cost nothing there); on accelerators it turns the router's
  ranking into exactly R(t) + A row ids on the device and scores the target's head through them (no copy, no
  host sync, no padding; on CUDA with Triton one kernel launch from the ranking to the top token).

Legend: H hidden, V target vocab, S shortlist size, C clusters.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.budget import RowBudget, row_budget
from hf_dynaspec.drafting.cluster_rows import ClusterRowTable, block_ranges
from hf_dynaspec.drafting.device_paths import use_accelerator_paths
from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput, shortlist_head
from hf_dynaspec.kernels.streams import Pending, SideStream


class FullHead:
    """The EAGLE baseline: every row of the target's head."""

    def __init__(self, head_weight: torch.Tensor):
        self.weight = head_weight
        self.min_rows = head_weight.shape[0]

    def choose_clusters(self, token_embed=None, prev_hidden=None, position: int = 0, inline: bool = False):
        return None

    def scores(self, hidden: torch.Tensor, clusters=None) -> ShortlistHeadOutput:
        """Hidden `[R, H]` -> scores `[R, V]`."""
        return ShortlistHeadOutput((hidden @ self.weight.T).float(), None)


class StaticHead:
    """FR-Spec / VocabTrim: a fixed list of token ids (plus the always-included ones)."""

    def __init__(self, head_weight: torch.Tensor, token_ids: torch.Tensor):
        self.token_ids = token_ids
        self.weight = head_weight[token_ids].contiguous()  # gathered once, when the head is built
        self.min_rows = len(token_ids)

    def choose_clusters(self, token_embed=None, prev_hidden=None, position: int = 0, inline: bool = False):
        return None

    def scores(self, hidden: torch.Tensor, clusters=None) -> ShortlistHeadOutput:
        """Hidden `[R, H]` -> scores `[R, S]`."""
        return ShortlistHeadOutput((hidden @ self.weight.T).float(), self.token_ids)


class ClusterHead:
    """DynaSpec: the router ranks the clusters; the first `budget.at(t)` rows of its ranking are scored
    (drafting/budget.py, drafting/cluster_rows.py), plus the always-included rows.

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
                        inline: bool = False) -> tuple[Pending, int]:
        """Start the router on this step's inputs `[R, D]`, `[R, H]` (before the drafter's layer runs): on the
        side stream where there is one, unless `inline` (a captured draft: drafting/captured.py)."""
        if inline:
            return Pending(self.router(token_embed, prev_hidden)), position
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
    def scores(self, hidden: torch.Tensor, clusters: tuple[Pending, int]) -> ShortlistHeadOutput:
        """Hidden `[R, H]` and the clusters the router chose for this step (`choose_clusters`: its scores pending,
        the draft position) -> scores `[R, R(t) + A]` of the budget's rows."""
        pending, position = clusters
        if self.indexed:
            return self.rows.scores(hidden, self.head_weight, self.ranking(pending.result()), self.budget.at(position))
        starts, ends = self._blocks(pending.result(), position)
        return shortlist_head(hidden, self.permuted_weight, starts, ends, self.token_order)


def build_head(strategy: str, head_weight: torch.Tensor, shortlists, options, indexed: bool | None = None):
    """The runtime head for `strategy` ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed").

    `options`: the drafting options (`DynaSpecGenerationConfig`: shortlist_size, shortlist_rows, max_clusters,
    fixed_clusters, max_shortlist_size). Inference only: the head weights are detached (training uses the modules, not these heads).
    """
    head_weight = head_weight.detach()
    if strategy == "full":
        return FullHead(head_weight)
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
