"""DynaSpec's position-aware budget: R(t), the cluster rows a draft step scores at draft position t.

The rule (issue 63): the router ranks every cluster; a step scores the first R(t) rows of that ranking, clusters
whole in the router's order, the last one cut (its most frequent tokens kept), plus the always-included ids.
Early draft tokens are the ones most likely to be accepted, so they get the widest shortlist. A fixed number of
rows means the step's shape never depends on the router's choice: on a device it scores exactly its real rows.

Where R(t) comes from (`row_budget`):
- `shortlist_rows` in the drafting options: R per draft position, the last entry for every later one (the
  shipped artifacts store the mean rows the earlier cluster-count rule scored on the dev prompts);
- `shortlist_rows="clusters"` (the default: artifacts saved before the row budget): the paper's cluster budget k(t) (`clusters_at_position`)
  times the rows the next token's cluster holds on average (`VocabClusters.expected_rows_per_cluster`).
"""

from __future__ import annotations

from collections.abc import Sequence


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
