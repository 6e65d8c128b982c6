"""Runtime shortlists: which LM-head rows the drafter scores at each draft position.

One selector is built per `generate()` call from the assistant's artifact and the target's LM head; it keeps
contiguous copies of the rows it may need (a static list's rows, or the cluster-permuted head), so that a
draft step multiplies contiguous blocks and never gathers rows per call.

Legend: H hidden, V target vocab, S shortlist size, C clusters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_dynaspec.kernels.shortlist_head import shortlist_head
from hf_dynaspec.kernels.streams import Pending, SideStream
from hf_dynaspec.drafting.budget import clusters_at_position


@dataclass
class HeadScores:
    logits: torch.Tensor  # [1, S] float32 scores of the shortlisted rows
    token_ids: torch.Tensor | None  # [S] target ids of those rows; None when S == V (full head, ids = positions)


class FullHead:
    """The EAGLE baseline: every row of the target's head."""

    def __init__(self, head_weight: torch.Tensor):
        self.weight = head_weight

    def plan(self, token_embed=None, prev_hidden=None, position: int = 0):
        return None

    def scores(self, hidden: torch.Tensor, plan=None) -> HeadScores:
        return HeadScores((hidden @ self.weight.T).float(), None)


class StaticHead:
    """FR-Spec / VocabTrim: a fixed list of token ids (plus the always-included ones)."""

    def __init__(self, head_weight: torch.Tensor, token_ids: torch.Tensor):
        self.token_ids = token_ids
        self.weight = head_weight[token_ids].contiguous()  # gathered once, when the head is built

    def plan(self, token_embed=None, prev_hidden=None, position: int = 0):
        return None

    def scores(self, hidden: torch.Tensor, plan=None) -> HeadScores:
        return HeadScores((hidden @ self.weight.T).float(), self.token_ids)


class ClusterHead:
    """DynaSpec: the router picks clusters; their contiguous row blocks of the permuted head are scored.

    `max_clusters` with `position_aware` gives the paper's k(t) budget; without it every position gets
    `max_clusters` (DynaSpec-fixed). `max_shortlist_size` caps S by dropping the lowest-scored clusters.
    """

    def __init__(self, head_weight, shortlists, max_clusters: int, position_aware: bool, max_shortlist_size=None):
        clusters = shortlists.clusters
        self.router = shortlists.router
        self.offsets = clusters.offsets.tolist()
        self.always_ids = clusters.always_ids
        # Clustered rows cluster by cluster, then the always-included rows as one final block.
        self.token_order = torch.cat([clusters.token_order, clusters.always_ids])
        self.num_clustered = len(clusters.token_order)
        self.permuted_weight = head_weight[self.token_order].contiguous()
        self.max_clusters = min(max_clusters, clusters.num_clusters)
        self.position_aware = position_aware
        self.max_shortlist_size = max_shortlist_size
        self.side_stream = SideStream(head_weight.device)

    def budget(self, position: int) -> int:
        return clusters_at_position(position, self.max_clusters) if self.position_aware else self.max_clusters

    def plan(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> tuple[Pending, int]:
        """Start the router on this step's inputs `[R, D]`, `[R, H]` (before the drafter's layer runs)."""
        return self.side_stream.launch(self.router, token_embed, prev_hidden), position

    def choose_clusters(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> list[int]:
        return self._clusters_from(self.router(token_embed, prev_hidden), position)

    def _clusters_from(self, cluster_scores: torch.Tensor, position: int) -> list[int]:
        """Router scores `[R, C]` -> the clusters to score at `position`. With several rows (the nodes of one
        tree depth, scored together) the clusters are ranked by their mean router probability."""
        ranking = cluster_scores[0] if cluster_scores.shape[0] == 1 else cluster_scores.softmax(-1).mean(0)
        chosen = ranking.topk(self.budget(position)).indices.tolist()  # best first
        if self.max_shortlist_size is not None:
            kept, size = [], len(self.always_ids)
            for c in chosen:
                block = self.offsets[c + 1] - self.offsets[c]
                if kept and size + block > self.max_shortlist_size:
                    break
                kept.append(c)
                size += block
            chosen = kept
        return sorted(chosen)  # in row order: reads the permuted head front to back

    @torch.no_grad()
    def shortlist_ids(self, token_embed: torch.Tensor, prev_hidden: torch.Tensor, position: int) -> torch.Tensor:
        """Target ids `[S]` of the shortlist at `position`, without scoring it (for coverage measurements)."""
        chosen = self.choose_clusters(token_embed, prev_hidden, position)
        blocks = [self.token_order[self.offsets[c] : self.offsets[c + 1]] for c in chosen]
        return torch.cat(blocks + [self.always_ids])

    @torch.no_grad()
    def scores(self, hidden: torch.Tensor, plan: tuple[Pending, int]) -> HeadScores:
        """Hidden `[R, H]` and the router plan of this step -> scores `[R, S]` of the chosen clusters' rows."""
        pending, position = plan
        chosen = self._clusters_from(pending.result(), position)
        # The always-included rows are the last block of the permuted head (see __init__).
        starts = [self.offsets[c] for c in chosen] + [self.num_clustered]
        ends = [self.offsets[c + 1] for c in chosen] + [self.num_clustered + len(self.always_ids)]
        logits, ids = shortlist_head(hidden, self.permuted_weight, starts, ends, self.token_order)
        return HeadScores(logits, ids)


def build_head(strategy: str, head_weight: torch.Tensor, shortlists, options):
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
        return ClusterHead(head_weight, shortlists, k, position_aware, options.max_shortlist_size)
    raise ValueError(f"unknown shortlist strategy {strategy!r}")
