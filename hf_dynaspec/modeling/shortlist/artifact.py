"""The shortlist part of an assistant artifact: frequency lists, vocabulary clusters and the router.

Stored as buffers/parameters of one submodule (`shortlists.*` keys in model.safetensors) whose sizes are
recorded in the config, so save/load is the assistant's own, symmetric and safetensors-only.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hf_dynaspec.modeling.shortlist.clustering import VocabClusters
from hf_dynaspec.modeling.shortlist.frequency import check_token_ids
from hf_dynaspec.modeling.shortlist.router import ClusterRouter


def _ids(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


class VocabShortlists(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.register_buffer("frequency_ids", _ids(config.frequency_list_size))
        self.register_buffer("vocabtrim_ids", _ids(config.vocabtrim_list_size))
        self.register_buffer("always_ids", _ids(config.num_always_ids))
        clustered = config.vocab_size - config.num_always_ids if config.num_clusters else 0
        self.register_buffer("cluster_token_order", _ids(clustered))
        self.register_buffer("cluster_offsets", _ids(config.num_clusters + 1 if config.num_clusters else 0))
        self.router = (
            ClusterRouter(config.target_hidden_size, config.hidden_size, config.num_clusters, config.router_hidden_size)
            if config.num_clusters
            else None
        )

    # -- building (each setter records the new size in the config) -------------------------------------
    def set_frequency_list(self, ids: torch.Tensor, kind: str = "frspec") -> None:
        """A ranking of token ids, most frequent first: `kind` "frspec" (corpus counts) or "vocabtrim"."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        check_token_ids(ids, self.config.vocab_size, f"{kind} list")
        name = {"frspec": "frequency", "vocabtrim": "vocabtrim"}[kind]
        setattr(self, f"{name}_ids", ids.to(self.frequency_ids.device))
        setattr(self.config, f"{name}_list_size", len(ids))

    def set_clusters(self, clusters: VocabClusters, router_hidden_size: int | None = None) -> None:
        """Install vocabulary clusters and a fresh (untrained) router for them."""
        clusters.validate(self.config.vocab_size)
        device = self.frequency_ids.device
        self.cluster_token_order = clusters.token_order.to(device)
        self.cluster_offsets = clusters.offsets.to(device)
        self.always_ids = clusters.always_ids.to(device)
        self.config.num_clusters = clusters.num_clusters
        self.config.num_always_ids = len(clusters.always_ids)
        if router_hidden_size is not None:
            self.config.router_hidden_size = router_hidden_size
        self.router = ClusterRouter(
            self.config.target_hidden_size, self.config.hidden_size, clusters.num_clusters, self.config.router_hidden_size
        ).to(device)

    def static_list(self, kind: str, size: int | None = None) -> torch.Tensor | None:
        """The first `size` ids of the `kind` ("frspec" | "vocabtrim") ranking plus the always-included ids
        (EOS and special tokens are always draftable); None when the artifact stores no such ranking."""
        ranking = self.frequency_ids if kind == "frspec" else self.vocabtrim_ids
        if len(ranking) == 0:
            return None
        ids = ranking[:size] if size else ranking
        return torch.cat([ids, self.always_ids[~torch.isin(self.always_ids, ids)]])

    @property
    def clusters(self) -> VocabClusters | None:
        if not self.config.num_clusters:
            return None
        return VocabClusters(self.cluster_token_order, self.cluster_offsets, self.always_ids)
