"""The device-side form of a cluster shortlist: a padded table of each cluster's head rows.

Row c of the table lists cluster c's token ids (= rows of the target's head), padded with -1 to the widest
cluster; row C holds the always-included ids, row C + 1 is all padding (the slot of a cluster dropped by the
size cap). The router's top-k (a device tensor) indexes the table: the shortlist's row ids come out with a shape
that depends only on k, never on which clusters were chosen, so a draft step needs no value on the host and the
head kernel reads the target's head through the ids (no permuted copy of the head).

Legend: C clusters, W table width (the widest cluster, or the always-included block), A always-included ids,
k clusters chosen, R router rows.
"""

from __future__ import annotations

import torch

from hf_dynaspec.modeling.shortlist.clustering import VocabClusters


class ClusterRowTable:
    """Built once per runtime head from the clusters' host copies (`VocabShortlists.host_clusters()`: CPU
    tensors, read freely here), then moved to `device` as finished tensors: building it never reads a device
    value, and never mixes a device tensor with a CPU one."""

    def __init__(self, clusters: VocabClusters, device: torch.device):
        if any(t.device.type != "cpu" for t in (clusters.token_order, clusters.offsets, clusters.always_ids)):
            raise ValueError("ClusterRowTable is built from the clusters' CPU copies (shortlists.host_clusters())")
        sizes = clusters.offsets.diff()
        num_clusters, num_always = clusters.num_clusters, len(clusters.always_ids)
        self.num_clusters = num_clusters
        self.width = max(int(sizes.max()), num_always, 1)
        table = torch.full((num_clusters + 2, self.width), -1, dtype=torch.long)
        cluster_of = torch.repeat_interleave(torch.arange(num_clusters), sizes)
        column = torch.arange(len(clusters.token_order)) - clusters.offsets[cluster_of]
        table[cluster_of, column] = clusters.token_order
        table[num_clusters, :num_always] = clusters.always_ids
        self.table = table.to(device)  # [C + 2, W]
        self.sizes = torch.cat([sizes, torch.tensor([num_always, 0])]).to(device)  # [C + 2]
        self.num_always = num_always
        self.always_slot = torch.tensor([num_clusters], device=device)
        self.dropped_slot = num_clusters + 1
        # The fewest real rows a shortlist can have: the smallest cluster (the best one is never dropped).
        self.min_rows = int(sizes.min()) + num_always
        self.offsets = clusters.offsets.tolist()  # host list: cluster c holds offsets[c + 1] - offsets[c] rows

    def capped(self, ranked: torch.Tensor, max_rows: int | None) -> torch.Tensor:
        """Clusters `[k]` ranked best first -> the same with those beyond the first that would take the shortlist
        past `max_rows` (always-included rows counted) replaced by the empty slot; shape unchanged."""
        if max_rows is None:
            return ranked
        # Running totals only grow, so the clusters that fit are a prefix of the ranking: the first that does not
        # fit ends the shortlist, as on the CPU path.
        keep = self.num_always + self.sizes[ranked].cumsum(0) <= max_rows
        keep[0] = True  # the best cluster is kept whatever its size
        return torch.where(keep, ranked, self.dropped_slot)

    def row_ids(self, chosen: torch.Tensor) -> torch.Tensor:
        """Chosen clusters `[k]` (device) -> row ids `[(k + 1) * W]`: the clusters' rows, then the always-included
        ones, -1 in padding."""
        return self.table[torch.cat([chosen, self.always_slot])].reshape(-1)
