"""Spherical k-means over the target's LM-head rows, stored as a permutation with contiguous clusters.

After clustering, `token_order` lists the clustered token ids cluster by cluster, so cluster c is the row
range `[offsets[c], offsets[c + 1])` of the permuted head `head[token_order]`: a shortlist made of whole
clusters is a set of row ranges, which a head kernel reads without per-token gathers. `always_ids` (EOS,
stop and special tokens) are kept out of the clusters and are in every shortlist.

Legend: V target vocab, D hidden, C clusters, A always-included tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VocabClusters:
    token_order: torch.Tensor  # [V - A] int64, clustered token ids, cluster by cluster
    offsets: torch.Tensor  # [C + 1] int64, cluster c is token_order[offsets[c]:offsets[c + 1]]
    always_ids: torch.Tensor  # [A] int64, in every shortlist

    @property
    def num_clusters(self) -> int:
        return len(self.offsets) - 1

    def cluster_of_token(self, vocab_size: int) -> torch.Tensor:
        """`[V]` cluster index of every token id (-1 for always-included tokens)."""
        labels = torch.full((vocab_size,), -1, dtype=torch.long)
        sizes = self.offsets[1:] - self.offsets[:-1]
        labels[self.token_order] = torch.repeat_interleave(torch.arange(self.num_clusters), sizes)
        return labels

    def validate(self, vocab_size: int) -> None:
        """Every token exactly once, in a cluster or among `always_ids`; offsets increasing."""
        everything = torch.cat([self.token_order, self.always_ids])
        if len(everything) != vocab_size or not torch.equal(everything.sort().values, torch.arange(vocab_size)):
            raise ValueError(
                f"vocabulary clusters do not partition a vocabulary of {vocab_size} tokens "
                f"({len(self.token_order)} clustered + {len(self.always_ids)} always-included): built for another "
                "target? Rebuild them with cluster_vocabulary(target LM head)."
            )
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.token_order) or (self.offsets.diff() < 1).any():
            raise ValueError("cluster offsets must start at 0, end at the clustered count and grow strictly")

    def frequency_ordered(self, ranking: torch.Tensor) -> VocabClusters:
        """The same clusters with each cluster's tokens most frequent first: by their place in `ranking` (token
        ids, most frequent first; e.g. the artifact's FR-Spec list), unranked tokens after them by id. A row
        budget that cuts a cluster then keeps its most frequent tokens (the cut is a prefix of the cluster)."""
        vocab_size = int(max(self.token_order.max(), ranking.max() if len(ranking) else 0)) + 1
        place = torch.arange(vocab_size, dtype=torch.long) + len(ranking)  # unranked: after the ranked, by id
        place[ranking] = torch.arange(len(ranking))
        labels = torch.repeat_interleave(torch.arange(self.num_clusters), self.offsets.diff())
        order = torch.argsort(labels * (vocab_size + len(ranking)) + place[self.token_order], stable=True)
        return VocabClusters(self.token_order[order], self.offsets, self.always_ids)

    def expected_rows_per_cluster(self, ranking: torch.Tensor) -> float:
        """How many rows the cluster of the next token holds, on average: each cluster's size weighted by its
        share of token frequency, Zipf weights (1 / rank) over `ranking` (unranked tokens weigh nothing); with
        no ranking, every token weighs the same (sum of size^2 / sum of size). What a row budget equal to an
        old artifact's k clusters costs when it stored no row budget (hf_dynaspec.drafting.selector).
        Measured against the shipped artifacts' real mean rows per chosen cluster: 2,774 vs 1,893 (0.5B),
        6,058 vs 3,881 (1.5B), 916 vs 937 (Gemma-3-270M): never far below, so an estimate loses no coverage."""
        sizes = self.offsets.diff().double()
        mass = sizes  # each cluster's share when every token weighs the same
        if len(ranking):
            labels = self.cluster_of_token(int(max(self.token_order.max(), ranking.max())) + 1)[ranking]
            weights = 1.0 / torch.arange(1, len(ranking) + 1, dtype=torch.double)
            ranked = labels >= 0  # always-included tokens belong to no cluster
            zipf = torch.zeros(self.num_clusters, dtype=torch.double).index_add_(0, labels[ranked], weights[ranked])
            mass = zipf if zipf.sum() > 0 else sizes
        return float((sizes * mass).sum() / mass.sum())


def cluster_vocabulary(
    head_weight: torch.Tensor,
    num_clusters: int,
    always_ids: list[int] | torch.Tensor = (),
    seed: int = 0,
    max_iter: int = 30,
    sample_size: int | None = 50_000,
    max_cluster_size: int | None = None,
) -> VocabClusters:
    """Spherical k-means (scikit-learn k-means on L2-normalised rows, centroids renormalised) of `head_weight` [V, D].

    The centroids are fitted on a seeded sample of `sample_size` rows (all rows if None), then every row
    goes to its most similar centroid (cosine), so the result is reproducible for a given seed.
    With `max_cluster_size`, no cluster holds more rows than that: rows go to their most similar centroid
    that still has room (`capped_assignment`); `balanced_cluster_size(rows, clusters)` is the smallest cap
    that fits, i.e. clusters of equal size (the Gemma-4 assistants' shape: every chosen cluster costs the same).
    """
    try:
        from sklearn.cluster import KMeans
    except ImportError as error:  # a training-time dependency (pyproject's `train` extra)
        raise ImportError("clustering the vocabulary for DynaSpec shortlists needs scikit-learn: "
                          "pip install 'hf-dynaspec[train]'") from error

    vocab_size = head_weight.shape[0]
    always = torch.as_tensor(list(always_ids) if not torch.is_tensor(always_ids) else always_ids, dtype=torch.long).unique()
    keep = torch.ones(vocab_size, dtype=torch.bool)
    keep[always] = False
    clustered_ids = keep.nonzero().flatten()
    if num_clusters < 1 or num_clusters > len(clustered_ids):
        raise ValueError(f"num_clusters must be in [1, {len(clustered_ids)}], got {num_clusters}")
    if max_cluster_size is not None and max_cluster_size < balanced_cluster_size(len(clustered_ids), num_clusters):
        raise ValueError(
            f"max_cluster_size={max_cluster_size} cannot hold {len(clustered_ids)} tokens in {num_clusters} clusters: "
            f"use at least {balanced_cluster_size(len(clustered_ids), num_clusters)} (balanced_cluster_size) or more "
            "clusters"
        )
    # k-means runs in scikit-learn, on the CPU: bring the rows over once, whatever device the head is on.
    rows = torch.nn.functional.normalize(head_weight.detach()[clustered_ids.to(head_weight.device)].float().cpu(),
                                         dim=-1)
    if sample_size is not None and sample_size < len(rows):  # a seeded sample
        fit_rows = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))[:sample_size]]
    else:
        fit_rows = rows
    kmeans = KMeans(n_clusters=num_clusters, n_init=1, max_iter=max_iter, random_state=seed)
    kmeans.fit(fit_rows.numpy())
    centroids = torch.nn.functional.normalize(torch.from_numpy(kmeans.cluster_centers_).float(), dim=-1)
    if max_cluster_size is None:
        labels = torch.cat([(chunk @ centroids.T).argmax(-1) for chunk in rows.split(16384)])
    else:
        labels = capped_assignment(rows, centroids, max_cluster_size)
    # Empty clusters (possible after reassignment to renormalised centroids) are dropped.
    order = torch.argsort(labels, stable=True)
    sizes = torch.bincount(labels, minlength=num_clusters)
    sizes = sizes[sizes > 0]
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    return VocabClusters(token_order=clustered_ids[order], offsets=offsets, always_ids=always)


def balanced_cluster_size(num_rows: int, num_clusters: int) -> int:
    """The smallest cap that lets `num_rows` rows fit in `num_clusters` clusters: ceil(rows / clusters)."""
    return -(-num_rows // num_clusters)


def capped_assignment(rows: torch.Tensor, centroids: torch.Tensor, capacity: int) -> torch.Tensor:
    """`[N]` cluster of each row of `rows` [N, D] (unit rows, `centroids` [C, D] unit): no cluster gets more than
    `capacity` rows. Rounds of proposals: every unplaced row proposes to its most similar cluster among those
    with room; a cluster keeps its most similar proposers up to its room (ties by row id) and is then closed
    if full. A row whose first choice has room is never moved, so with a large enough cap this is the plain
    argmax. Each round fills a cluster or places every proposer, so it ends within C + 1 rounds."""
    num_rows, num_clusters = len(rows), len(centroids)
    if capacity * num_clusters < num_rows:
        raise ValueError(f"{num_rows} rows do not fit in {num_clusters} clusters of {capacity}")
    labels = torch.full((num_rows,), -1, dtype=torch.long)
    room = torch.full((num_clusters,), capacity, dtype=torch.long)
    while (unplaced := (labels < 0).nonzero().flatten()).numel():
        closed = room == 0
        choice, similarity = [], []
        for chunk in unplaced.split(16384):
            scores = (rows[chunk] @ centroids.T).masked_fill_(closed, float("-inf"))
            best = scores.max(-1)
            choice.append(best.indices)
            similarity.append(best.values)
        choice, similarity = torch.cat(choice), torch.cat(similarity)
        # Proposers grouped by cluster, most similar first (stable sort: ties keep row order).
        order = torch.argsort(-similarity, stable=True)
        order = order[torch.argsort(choice[order], stable=True)]
        grouped = choice[order]
        first_of_group = torch.searchsorted(grouped, grouped)
        place_in_group = torch.arange(len(order)) - first_of_group
        accepted = order[place_in_group < room[grouped]]
        labels[unplaced[accepted]] = choice[accepted]
        room -= torch.bincount(choice[accepted], minlength=num_clusters)
    return labels
