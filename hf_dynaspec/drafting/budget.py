"""DynaSpec's position-aware cluster budget."""

from __future__ import annotations


def clusters_at_position(position: int, max_clusters: int) -> int:
    """k(t): `max_clusters` for draft positions 0 and 1, then floor(k_max / ((t + 1) * 2)), at least 1.

    Early draft tokens are the ones most likely to be accepted, so they get the widest shortlist.
    """
    if position < 0 or max_clusters < 1:
        raise ValueError(f"need position >= 0 and max_clusters >= 1, got {position}, {max_clusters}")
    if position <= 1:
        return max_clusters
    return max(1, max_clusters // ((position + 1) * 2))
