"""A draft tree and the attention masks and positions that let a model read it in one forward pass.

Node 0 is the root: the newest committed token, which the target has not processed yet. Nodes 1..N-1 are
draft tokens. `parents[i] < i` for every draft node (parents come first), `parents[0] == -1`. A node at depth
d continues the sequence at position `past_length + d`, and attends to the cached prefix, its ancestors and
itself, never to its siblings or cousins: reading the tree in one pass then gives every node exactly the
logits a plain forward over its own root-to-node path would give.

Legend: N tree nodes (root included), P cached prefix length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def depths_of(parents: list[int]) -> list[int]:
    """Each node's depth, checking that `parents` describe one tree rooted at node 0 (parents precede children)."""
    if not parents or parents[0] != -1:
        raise ValueError("parents must have one entry per token and parents[0] == -1 (the root)")
    depths = [0] * len(parents)
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}: parents must precede their children")
        depths[i] = depths[p] + 1
    return depths


@dataclass
class DraftTree:
    token_ids: torch.Tensor  # [N] long, target vocabulary ids; token_ids[0] is the root
    parents: torch.Tensor  # [N] long, parents[0] = -1, parents[i] < i
    depths: torch.Tensor  # [N] long, depths[0] = 0, depths[i] = depths[parents[i]] + 1
    # an upper bound of max(depths), known on the host (the drafter's depth): the ancestor matrix then needs no
    # value from the device
    max_depth: int | None = None

    @classmethod
    def from_parents(cls, token_ids: torch.Tensor, parents: list[int]) -> DraftTree:
        """Build a tree from parent indices, checking that they describe one tree rooted at node 0."""
        if len(parents) != len(token_ids):
            raise ValueError("parents must have one entry per token and parents[0] == -1 (the root)")
        depths = depths_of(parents)
        device = token_ids.device
        return cls(token_ids, torch.tensor(parents, device=device), torch.tensor(depths, device=device), max(depths))

    def __len__(self) -> int:
        return self.token_ids.shape[0]

    def children(self) -> list[list[int]]:
        """Children of each node, in node order (the order the drafter ranked them)."""
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for i, p in enumerate(self.parents.tolist()[1:], start=1):
            kids[p].append(i)
        return kids

    def ancestor_matrix(self) -> torch.Tensor:
        """`[N, N]` bool: entry (i, j) is True when node j is node i or one of its ancestors.

        One vectorised step per depth level (each adds every node's parent's row to its own), a handful of
        device operations whatever the tree's size, and no value read back from the device."""
        n = len(self)
        device = self.parents.device
        own = torch.eye(n, dtype=torch.bool, device=device)
        has_parent = (self.parents >= 0)[:, None]
        parent = self.parents.clamp(min=0)
        visible = own
        levels = self.max_depth if self.max_depth is not None else n - 1
        for _ in range(levels):
            visible = own | (visible[parent] & has_parent)
        return visible

    def greedy_chain_outcome(self, accepted: list[int]) -> tuple[int, int]:
        """How a chain of the drafter's most likely tokens would have fared where this tree was verified with
        `accepted` (the accepted nodes, root excluded, root-to-leaf): (its tokens accepted, its positions verified).

        A node's first child is its most likely kept child (EAGLE-2 keeps children by score, and a kept child
        never outscores its parent's argmax child), i.e. the chain's next token. The chain is accepted while the
        accepted path follows first children, and is rejected at the next depth where the path leaves them or
        stops (when the tree has a child there); where the tree ends, so does what it tells. Under sampling the
        tree tries the first child first, with the chain's acceptance probability. The shortlist per depth can
        make the tree's argmax differ from the chain's: an estimate, for the planner's tables."""
        kids = self.children()
        node, followed = 0, 0
        for child in accepted:
            if not kids[node] or kids[node][0] != child:
                break
            followed += 1
            node = child
        return followed, followed + (1 if kids[node] else 0)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to `node`, both included."""
        parents = self.parents.tolist()
        path = [node]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        return path[::-1]
