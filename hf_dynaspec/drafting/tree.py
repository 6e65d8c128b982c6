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

from hf_dynaspec.modeling.drafter import Drafter
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.tree_structure import DraftTree


class TreeDraftSession(ChainDraftSession):
    """Drafting state of one tree-decoding call: the chain session's verified-prefix handling plus trees."""

    def __init__(self, drafter: Drafter, vocab_size: int, *, top_k: int, depth: int, total_tokens: int,
                 head=None):
        super().__init__(drafter, vocab_size, do_sample=False, logits_processor=None, head=head)
        if top_k < 1 or depth < 1 or total_tokens < 1:
            raise ValueError(f"tree sizes must be positive: top_k={top_k}, depth={depth}, total_tokens={total_tokens}")
        self.top_k = top_k
        self.depth = depth
        self.total_tokens = total_tokens

    @torch.no_grad()
    def propose_tree(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor,
                     max_depth: int | None = None) -> DraftTree:
        """A draft tree rooted at the last token of `input_ids` `[1, L]` (see ChainDraftSession.propose for
        `new_target_hidden`). `max_depth` caps the depth (e.g. near max_length)."""
        depth = self.depth if max_depth is None else max(1, min(self.depth, max_depth))
        hidden, plan = self.consume_verified(input_ids, new_target_hidden)
        self.shortlists_of_last_draft = []
        log_probs, ids = self._log_probs(hidden[0], plan)  # [1, S]
        k = min(self.top_k, log_probs.shape[-1])
        scores, rows = log_probs[0].topk(k)
        # Candidates, in creation order: token ids, parent candidate (-1 = root), cumulative score, depth.
        cand_tokens = [self._row_ids(ids, rows)]
        cand_parents = [-1] * k
        cand_scores = [scores]
        cand_depths = [1] * k
        frontier = list(range(k))
        frontier_tokens, frontier_scores = cand_tokens[0], scores
        parent_hidden = hidden[0].expand(k, -1)  # [R, H]: the drafter state that predicted each frontier node
        slot_of: dict[int, int] = {}  # candidate -> its entry in the drafter cache, once expanded
        seq_len = input_ids.shape[1]
        for d in range(1, depth):
            embeds = self.drafter.embed(frontier_tokens[None])  # [1, R, D]
            plan = self._plan(embeds[0], parent_hidden, d)
            mask = self._frontier_mask(frontier, cand_parents, slot_of, frontier_tokens.device)
            first_slot = self.cache.length
            position_ids = torch.full((1, len(frontier)), seq_len - 2 + d, device=frontier_tokens.device,
                                      dtype=torch.long)
            new_hidden = self.drafter.step(embeds, parent_hidden[None], position_ids, self.cache, mask)[0]  # [R, H]
            for j, c in enumerate(frontier):
                slot_of[c] = first_slot + j
            log_probs, ids = self._log_probs(new_hidden, plan)  # [R, S]
            k = min(self.top_k, log_probs.shape[-1])
            child_lp, child_rows = log_probs.topk(k, dim=-1)  # [R, k]
            child_scores = (frontier_scores[:, None] + child_lp).reshape(-1)  # [R * k]
            first = len(cand_parents)
            cand_tokens.append(self._row_ids(ids, child_rows.reshape(-1)))
            cand_parents.extend(c for c in frontier for _ in range(k))
            cand_scores.append(child_scores)
            cand_depths.extend([d + 1] * child_scores.shape[0])
            if d + 1 == depth:
                break
            best = child_scores.topk(min(self.top_k, child_scores.shape[0])).indices
            frontier = [first + i for i in best.tolist()]
            frontier_tokens, frontier_scores = cand_tokens[-1][best], child_scores[best]
            parent_hidden = new_hidden[best // k]
        return self._select(input_ids[0, -1:], torch.cat(cand_tokens), cand_parents, torch.cat(cand_scores),
                            cand_depths)

    # -- pieces ------------------------------------------------------------------------------------------
    def _log_probs(self, hidden: torch.Tensor, plan) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafter hidden `[R, H]` -> log-probabilities over its shortlist `[R, S]` and the shortlist ids."""
        if self.head is not None:
            scores = self.head.scores(hidden, plan)
            logits, ids = scores.logits, scores.token_ids
        else:
            logits, ids = self.drafter.draft_vocab_logits(hidden).float(), self.shortlist_ids
        self.shortlists_of_last_draft.append(ids)
        return logits.log_softmax(dim=-1), ids

    @staticmethod
    def _row_ids(ids: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        return rows if ids is None else ids[rows]

    def _frontier_mask(self, frontier: list[int], parents: list[int], slot_of: dict[int, int],
                       device: torch.device) -> torch.Tensor:
        """Bool mask `[1, 1, R, cache + R]`: the verified prefix, the node's expanded ancestors, itself."""
        cached = self.cache.length
        mask = torch.zeros(len(frontier), cached + len(frontier), dtype=torch.bool, device=device)
        mask[:, : self.num_verified_pairs] = True
        for j, c in enumerate(frontier):
            mask[j, cached + j] = True
            ancestor = parents[c]
            while ancestor >= 0:
                mask[j, slot_of[ancestor]] = True
                ancestor = parents[ancestor]
        return mask[None, None]

    def _select(self, root: torch.Tensor, tokens: torch.Tensor, parents: list[int], scores: torch.Tensor,
                depths: list[int]) -> DraftTree:
        """Keep the `total_tokens` best candidates (ties: shallower first, so parents precede children)."""
        score_list = scores.tolist()
        ranked = sorted(range(len(parents)), key=lambda c: (-score_list[c], depths[c], c))
        rank = {c: r for r, c in enumerate(ranked)}
        kept = sorted(ranked[: self.total_tokens], key=lambda c: (depths[c], rank[c]))
        node_of = {c: i + 1 for i, c in enumerate(kept)}  # candidate -> tree node (0 is the root)
        tree_parents = [-1] + [0 if parents[c] < 0 else node_of[parents[c]] for c in kept]
        token_ids = torch.cat([root, tokens[kept]])
        return DraftTree.from_parents(token_ids, tree_parents)
