"""The device-side form of a cluster shortlist: the chosen clusters' head rows as one compact id list.

The router's top-k (a device tensor) selects clusters; their token ids (= rows of the target's head) are laid
end to end, in cluster order, into a list of a fixed length `bound(k)`: the most rows any k clusters can hold
(the k largest, or the size cap), padded with -1 after the real rows; the always-included ids follow as one
exact block. The length depends only on k, never on which clusters were chosen, so a draft step needs no value
on the host, and the head kernel reads the target's head through the ids (no permuted copy of the head).

Why a compact list and not a table of per-cluster rows padded to the widest cluster: cluster sizes are very
uneven (Qwen2.5's 256 clusters: median 160 rows, largest 16,365), so a padded table scored (k + 1) x 16,365
columns per step (147k at k = 8, about the whole vocabulary), 95% of them padding. The compact list scores at
most the k largest clusters plus the always-included block (80k at k = 8), whatever the choice.

Legend: C clusters, A always-included ids, k clusters chosen, L = bound(k) cluster columns.
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
        self.num_clusters = clusters.num_clusters
        self.num_always = len(clusters.always_ids)
        self.offsets = clusters.offsets.tolist()  # host list: cluster c holds offsets[c + 1] - offsets[c] rows
        self._sizes_largest_first = sizes.sort(descending=True).values.tolist()
        # Slot C is the empty cluster a size cap puts in place of a dropped one (no rows).
        self.sizes = torch.cat([sizes, sizes.new_zeros(1)]).to(device)  # [C + 1]
        self.starts = torch.cat([clusters.offsets[:-1], sizes.new_zeros(1)]).to(device)  # [C + 1]
        self.token_order = clusters.token_order.to(device)  # [V - A]
        self.always_ids = clusters.always_ids.to(device)  # [A]
        self.dropped_slot = self.num_clusters
        self._columns = torch.arange(sum(self._sizes_largest_first), device=device)  # sliced per step
        self._bounds: dict[tuple[int, int | None], int] = {}
        # The fewest real rows a shortlist can have: the smallest cluster (the best one is never dropped).
        self.min_rows = int(sizes.min()) + self.num_always

    def bound(self, k: int, max_rows: int | None = None) -> int:
        """Cluster columns of a step that chooses `k` clusters (host int): the k largest clusters' rows, or
        fewer under a size cap `max_rows` (always-included rows counted), which keeps at least the best
        cluster whatever its size. Computed once per (k, cap): a draft step only looks it up."""
        if (k, max_rows) not in self._bounds:
            largest = self._sizes_largest_first
            bound = sum(largest[:k])
            if max_rows is not None:
                bound = min(bound, max(max_rows - self.num_always, largest[0]))
            self._bounds[k, max_rows] = bound
        return self._bounds[k, max_rows]

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

    def row_ids(self, chosen: torch.Tensor, max_rows: int | None = None) -> torch.Tensor:
        """Chosen clusters `[k]` (device; the empty slot allowed) -> row ids `[bound(k, max_rows) + A]`: the
        clusters' rows in cluster order (the CPU path's column order), -1 after them, then the always-included
        ids. No host read: every shape is known from k."""
        chosen = chosen.sort().values  # cluster order; the empty slot (C) sorts last
        sizes = self.sizes[chosen]  # [k]
        ends = sizes.cumsum(0)  # [k]: where each cluster's rows end in the list
        columns = self._columns[: self.bound(chosen.shape[0], max_rows)]  # [L]
        which = torch.searchsorted(ends, columns, right=True).clamp(max=chosen.shape[0] - 1)  # [L]
        source = self.starts[chosen][which] + columns - (ends - sizes)[which]
        real = columns < ends[-1]
        ids = torch.where(real, self.token_order[source.clamp(max=self.token_order.shape[0] - 1)], -1)
        return torch.cat([ids, self.always_ids])
