"""EAGLE-2 dynamic draft trees, scored through the shortlisted head with DynaSpec's budget per depth.

Each round (after the drafter has consumed the newly verified positions, exactly as in chain drafting):

1. depth 1: the `top_k` most likely tokens after the root become candidates and the first frontier;
2. depths 2..`depth`: the frontier (at most `top_k` nodes) is expanded in one drafter step, every node reading
   the verified prefix and its own ancestors only (a tree mask over the drafter's cache); each proposes its
   `top_k` children, scored by cumulative log-probability (the drafter's confidence in the whole path); all
   of them become candidates and the `top_k` best form the next frontier;
3. the `total_tokens` candidates with the highest cumulative scores form the tree. A child never scores
   above its parent, so the selection always contains every selected node's ancestors.

All frontier nodes of one depth share one shortlist: the router's probabilities averaged over them, with the
cluster budget of that depth (`k(depth - 1)`, widest near the root). The drafting is deterministic top-k
for greedy and sampled decoding alike; the verifier's acceptance rule makes either lossless.

Legend: N tree nodes, R frontier nodes, H drafter hidden, S shortlist size.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.contract import DraftTree
from hf_dynaspec.modeling.drafter import Drafter


class TreeDraftSession:
    """Drafting state of one tree-decoding call: trees grown on a chain session (`chain`), which owns the drafter's
    cache of the verified prefix, absorbs the verified positions and plans each depth's shortlist. Composition,
    not inheritance: a tree session has no chain `draft`."""

    def __init__(self, drafter: Drafter, vocab_size: int, *, top_k: int, depth: int, total_tokens: int,
                 head=None, chain: ChainDraftSession | None = None):
        """`chain`: the chain session whose verified prefix the trees grow on (a planned round that drafts chains
        in some rounds and trees in others shares one); None starts one."""
        if top_k < 1 or depth < 1 or total_tokens < 1:
            raise ValueError(f"tree sizes must be positive: top_k={top_k}, depth={depth}, total_tokens={total_tokens}")
        if chain is not None and (chain.drafter is not drafter or chain.head is not head or chain.do_sample):
            raise ValueError("a tree session grows on a chain session of the same drafter and head, drafting "
                             "deterministically (do_sample=False)")
        self.chain = chain if chain is not None else ChainDraftSession(drafter, vocab_size, do_sample=False, head=head)
        self.drafter = drafter
        self.head = head
        self.top_k = top_k
        self.depth = depth
        self.total_tokens = total_tokens
        self.shortlists_of_last_draft: list[torch.Tensor | None] = []  # ids scored at each depth

    @torch.no_grad()
    def draft_tree(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor,
                     max_depth: int | None = None) -> DraftTree:
        """A draft tree rooted at the last token of `input_ids` `[1, L]` (see ChainDraftSession.draft for
        `new_target_hidden`). `max_depth` caps the depth (e.g. near max_length).

        Every value stays on the drafter's device: the candidates' parents, scores and the frontier's attention
        rows are tensors whose shapes depend only on the tree sizes, so drafting a tree never waits on an
        accelerator (tests/test_sync_budget.py)."""
        depth = self.depth if max_depth is None else max(1, min(self.depth, max_depth))
        new_hidden, clusters = self.chain.consume_verified(input_ids, new_target_hidden)
        new_hidden = new_hidden[0]  # [1, H]: the drafter state that predicts the root's children
        self.shortlists_of_last_draft = []
        device = input_ids.device
        # Candidates, in creation order (blocks per depth): token ids, parent candidate (-1 = root), cumulative
        # score, depth.
        cand_tokens, cand_parents, cand_scores, cand_depths = [], [], [], []
        num_candidates = 0
        frontier = torch.full((1,), -1, device=device)  # candidate index of each frontier node: the root first
        frontier_scores = torch.zeros(1, device=device)
        # [R, tree slots]: the drafter-cache slots (after the verified prefix) each frontier node may read
        tree_rows = torch.ones(1, 0, dtype=torch.bool, device=device)
        frontier_tokens = parent_hidden = None  # the frontier's tokens and the states that predicted them: depth >= 1
        seq_len = input_ids.shape[1]
        for d in range(depth):
            num_frontier = frontier.shape[0]
            if d:  # the frontier's drafter step (the root's was the pass over the verified positions)
                embeds = self.drafter.embed(frontier_tokens[None])  # [1, R, D]
                clusters = self.chain.chosen_clusters(embeds[0], parent_hidden, d)
                # Its ancestors' slots (its parent's row) and its own new slot.
                tree_rows = torch.cat([tree_rows, torch.eye(num_frontier, dtype=torch.bool, device=device)], dim=1)
                mask = torch.cat([torch.ones(num_frontier, self.chain.num_verified_pairs, dtype=torch.bool,
                                             device=device), tree_rows], dim=1)[None, None]
                position_ids = torch.full((1, num_frontier), seq_len - 2 + d, device=device, dtype=torch.long)
                new_hidden = self.drafter.step(embeds, parent_hidden[None], position_ids, self.chain.cache, mask)[0]
            log_probs, ids = self._log_probs(new_hidden, clusters)  # [R, S]
            k = self._children_per_node(log_probs)
            child_lp, child_rows = log_probs.topk(k, dim=-1)  # [R, k]
            child_scores = (frontier_scores[:, None] + child_lp).reshape(-1)  # [R * k]
            first = num_candidates
            num_candidates += child_scores.shape[0]
            cand_tokens.append(self._row_ids(ids, child_rows.reshape(-1)))
            cand_parents.append(frontier[:, None].expand(num_frontier, k).reshape(-1))
            cand_scores.append(child_scores)
            cand_depths.append(torch.full((child_scores.shape[0],), d + 1, dtype=torch.long, device=device))
            if d + 1 == depth:
                break
            # The root's children all join the frontier, in their rank order; deeper, the top_k best.
            best = child_scores.topk(min(self.top_k, len(child_scores))).indices if d else torch.arange(k, device=device)
            frontier = first + best
            frontier_tokens, frontier_scores = cand_tokens[-1][best], child_scores[best]
            parent_hidden = new_hidden[best // k]  # [R, H]
            tree_rows = tree_rows[best // k]
        return self._select(input_ids[0, -1:], torch.cat(cand_tokens), torch.cat(cand_parents),
                            torch.cat(cand_scores), torch.cat(cand_depths), depth)

    # -- pieces ------------------------------------------------------------------------------------------
    def _log_probs(self, hidden: torch.Tensor, clusters) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafter hidden `[R, H]` -> log-probabilities over its shortlist `[R, S]` and the shortlist ids."""
        scores = self.chain.score(hidden, clusters)
        self.shortlists_of_last_draft.append(scores.token_ids)
        return scores.scores.log_softmax(dim=-1), scores.token_ids

    def _children_per_node(self, log_probs: torch.Tensor) -> int:
        """top_k, capped by the rows a shortlist surely has (padding columns, scored -inf, are never drafted)."""
        rows = log_probs.shape[-1] if self.head is None else min(log_probs.shape[-1], self.head.min_rows)
        return min(self.top_k, rows)

    @staticmethod
    def _row_ids(ids: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        return rows if ids is None else ids[rows]

    def _select(self, root: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, scores: torch.Tensor,
                depths: torch.Tensor, max_depth: int) -> DraftTree:
        """Keep the `total_tokens` best candidates `[M]` (ties: created first, hence shallower first, so parents
        precede children) as a tree in (depth, rank) order; all on the device."""
        ranked = torch.sort(scores, descending=True, stable=True).indices
        kept = ranked[: self.total_tokens]
        kept = kept[torch.sort(depths[kept], stable=True).indices]
        node_of = torch.zeros_like(parents)  # candidate -> tree node (0 is the root)
        node_of[kept] = torch.arange(1, kept.shape[0] + 1, device=kept.device)
        kept_parents = parents[kept]
        tree_parents = torch.where(kept_parents < 0, 0, node_of[kept_parents.clamp(min=0)])
        return DraftTree(
            token_ids=torch.cat([root, tokens[kept]]),
            parents=torch.cat([torch.full((1,), -1, dtype=torch.long, device=kept.device), tree_parents]),
            depths=torch.cat([torch.zeros(1, dtype=torch.long, device=kept.device), depths[kept]]),
            max_depth=max_depth,
        )
