"""DynaSpec's router: a light classifier r([E(x_t) ; h_{t-1}]) -> C cluster scores.

It reads only what exists before the drafter's decoder layer runs (the current token's embedding and the
drafter's previous hidden state), so on GPU it can run on a side stream alongside the layer.
Legend: B batch, D target hidden (embedding), H drafter hidden, C clusters, R router width.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ClusterRouter(nn.Module):
    def __init__(self, embed_size: int, hidden_size: int, num_clusters: int, router_hidden_size: int = 256):
        super().__init__()
        self.proj = nn.Linear(embed_size + hidden_size, router_hidden_size)
        self.out = nn.Linear(router_hidden_size, num_clusters)

    def forward(self, token_embeds: torch.Tensor, prev_hidden: torch.Tensor) -> torch.Tensor:
        """`[B, D]`, `[B, H]` -> cluster scores `[B, C]` (logits)."""
        x = torch.cat([token_embeds, prev_hidden], dim=-1).to(self.proj.weight.dtype)
        return self.out(F.silu(self.proj(x)))

    @staticmethod
    def loss(cluster_scores: torch.Tensor, next_token_clusters: torch.Tensor) -> torch.Tensor:
        """Cross-entropy with the cluster of the target's next token as label (-1 = always-included, ignored)."""
        return F.cross_entropy(cluster_scores.float(), next_token_clusters, ignore_index=-1)

    @staticmethod
    def top_k_recall(cluster_scores: torch.Tensor, next_token_clusters: torch.Tensor, k: int) -> float:
        """Fraction of labelled positions whose next-token cluster is among the top-k scored clusters."""
        valid = next_token_clusters >= 0
        if not valid.any():
            return float("nan")
        top = cluster_scores[valid].topk(k, dim=-1).indices
        return (top == next_token_clusters[valid, None]).any(-1).float().mean().item()
