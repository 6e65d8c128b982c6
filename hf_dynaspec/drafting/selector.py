"""Runtime shortlists: which LM-head rows the drafter scores at each draft position.

One head is built per assistant and drafting options (drafting/runtime.py caches it) from the artifact and the
target's LM head. Every head's `scores` returns a `ShortlistHeadOutput` (scores, target ids of the columns,
argmax / max / log-sum-exp, fused where a kernel computes them) and keeps every value on the head's device:
a draft step never waits on an accelerator.

- `FullHead`: every row (the EAGLE baseline);
- `StaticHead`: a fixed list (FR-Spec, VocabTrim), its rows gathered once into a contiguous copy;
- `ClusterHead`: DynaSpec. On CPU it reads contiguous blocks of a cluster-permuted copy of the head (the
  measured fast path; host-side lists cost nothing there); on accelerators it indexes a padded per-cluster row
  table with the router's top-k and scores the target's head through the row ids (no copy, no host sync).

Legend: H hidden, V target vocab, S shortlist size, C clusters.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.budget import clusters_at_position
from hf_dynaspec.drafting.cluster_rows import ClusterRowTable
from hf_dynaspec.drafting.device_paths import use_accelerator_paths
from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput, indexed_head, shortlist_head
from hf_dynaspec.kernels.streams import Pending, SideStream


class FullHead:
    """The EAGLE baseline: every row of the target's head."""

    def __init__(self, head_weight: torch.Tensor):
        self.weight = head_weight
        self.min_rows = head_weight.shape[0]

    def route(self, token_embed=None, prev_hidden=None, position: int = 0):
        return None

    def scores(self, hidden: torch.Tensor, routing=None) -> ShortlistHeadOutput:
        """Hidden `[R, H]` -> scores `[R, V]`."""
        return ShortlistHeadOutput((hidden @ self.weight.T).float(), None)


class StaticHead:
    """FR-Spec / VocabTrim: a fixed list of token ids (plus the always-included ones)."""

    def __init__(self, head_weight: torch.Tensor, token_ids: torch.Tensor):
        self.token_ids = token_ids
        self.weight = head_weight[token_ids].contiguous()  # gathered once, when the head is built
        self.min_rows = len(token_ids)

    def route(self, token_embed=None, prev_hidden=None, position: int = 0):
        return None

    def scores(self, hidden: torch.Tensor, routing=None) -> ShortlistHeadOutput:
        """Hidden `[R, H]` -> scores `[R, S]`."""
        return ShortlistHeadOutput((hidden @ self.weight.T).float(), self.token_ids)


class ClusterHead:
    """DynaSpec: the router picks clusters; their rows are scored.

    `max_clusters` with `position_aware` gives the paper's k(t) budget; without it every position gets
    `max_clusters` (DynaSpec-fixed). `max_shortlist_size` caps S by dropping the lowest-scored clusters.
    `indexed` (default: drafting/device_paths.py) picks the device-side form (see the module docstring).
    """

    def __init__(self, head_weight, shortlists, max_clusters: int, position_aware: bool, max_shortlist_size=None,
                 indexed: bool | None = None):
        clusters = shortlists.host_clusters()  # CPU copies: what the head's index structures are built from
        self.router = shortlists.router
        self.always_ids = clusters.always_ids.to(head_weight.device)
        self.max_clusters = min(max_clusters, clusters.num_clusters)
        self.position_aware = position_aware
        self.max_shortlist_size = max_shortlist_size
        self.side_stream = SideStream(head_weight.device)
        self.indexed = use_accelerator_paths(head_weight.device) if indexed is None else indexed
        if self.indexed:
            self.head_weight = head_weight
            self.rows = ClusterRowTable(clusters, head_weight.device)
            self.min_rows = self.rows.min_rows
        else:
            self.offsets = clusters.offsets.tolist()
            # Clustered rows cluster by cluster, then the always-included rows as one final block.
            self.token_order = torch.cat([clusters.token_order, clusters.always_ids]).to(head_weight.device)
            self.num_clustered = len(clusters.token_order)
            self.permuted_weight = head_weight[self.token_order].contiguous()
            self.min_rows = min(b - a for a, b in zip(self.offsets, self.offsets[1:])) + len(self.always_ids)

    def budget(self, position: int) -> int:
        return clusters_at_position(position, self.max_clusters) if self.position_aware else self.max_clusters

    def route(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> tuple[Pending, int]:
        """Start the router on this step's inputs `[R, D]`, `[R, H]` (before the drafter's layer runs)."""
        return self.side_stream.launch(self.router, token_embed, prev_hidden), position

    def _ranked(self, cluster_scores: torch.Tensor, position: int) -> torch.Tensor:
        """Router scores `[R, C]` -> the `budget(position)` best clusters `[k]`, best first (on the device). With
        several rows (the nodes of one tree depth, scored together) clusters are ranked by mean probability."""
        ranking = cluster_scores[0] if cluster_scores.shape[0] == 1 else cluster_scores.softmax(-1).mean(0)
        return ranking.topk(self.budget(position)).indices

    def choose_clusters(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> list[int]:
        """The clusters scored at `position`, in row order (host list; for measurements and tests)."""
        return self._clusters_from(self.router(token_embed, prev_hidden), position)

    def _clusters_from(self, cluster_scores: torch.Tensor, position: int) -> list[int]:
        chosen = self._ranked(cluster_scores, position).tolist()
        if self.max_shortlist_size is not None:
            offsets = self.rows.offsets if self.indexed else self.offsets
            kept, size = [], len(self.always_ids)
            for c in chosen:
                block = offsets[c + 1] - offsets[c]
                if kept and size + block > self.max_shortlist_size:
                    break
                kept.append(c)
                size += block
            chosen = kept
        return sorted(chosen)  # in row order: reads the permuted head front to back

    @torch.no_grad()
    def shortlist_ids(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> torch.Tensor:
        """Target ids `[S]` of the shortlist at `position`, without scoring it (for coverage measurements)."""
        if self.indexed:
            ranked = self.rows.capped(self._ranked(self.router(token_embed, prev_hidden), position),
                                      self.max_shortlist_size)
            ids = self.rows.row_ids(ranked, self.max_shortlist_size)
            return ids[ids >= 0]
        chosen = self.choose_clusters(token_embed, prev_hidden, position)
        blocks = [self.token_order[self.offsets[c] : self.offsets[c + 1]] for c in chosen]
        return torch.cat(blocks + [self.always_ids])

    @torch.no_grad()
    def scores(self, hidden: torch.Tensor, routing: tuple[Pending, int]) -> ShortlistHeadOutput:
        """Hidden `[R, H]` and the router routing of this step -> scores `[R, S]` of the chosen clusters' rows (on
        the indexed path S is `bound(k) + A` (drafting/cluster_rows.py), padding columns scored -inf with id -1)."""
        pending, position = routing
        if self.indexed:
            ranked = self.rows.capped(self._ranked(pending.result(), position), self.max_shortlist_size)
            return indexed_head(hidden, self.head_weight, self.rows.row_ids(ranked, self.max_shortlist_size))
        chosen = self._clusters_from(pending.result(), position)
        # The always-included rows are the last block of the permuted head (see __init__).
        starts = [self.offsets[c] for c in chosen] + [self.num_clustered]
        ends = [self.offsets[c + 1] for c in chosen] + [self.num_clustered + len(self.always_ids)]
        return shortlist_head(hidden, self.permuted_weight, starts, ends, self.token_order)


def build_head(strategy: str, head_weight: torch.Tensor, shortlists, options, indexed: bool | None = None):
    """The runtime head for `strategy` ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed").

    `options`: the drafting options (`DynaSpecGenerationConfig`: shortlist_size, max_clusters, fixed_clusters,
    max_shortlist_size). Inference only: the head weights are detached (training uses the modules, not these heads).
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
        position_aware = strategy == "dynaspec"
        k = options.max_clusters if position_aware else options.fixed_clusters
        return ClusterHead(head_weight, shortlists, k, position_aware, options.max_shortlist_size, indexed)
    raise ValueError(f"unknown shortlist strategy {strategy!r}")
