"""The one contract between a decoding loop and a drafter's rounds (`DraftingRound`), and between a round and what
it drafts from (`Proposer`).

A loop (transformers' assisted loop through hf_dynaspec.generation.candidate_generator, the batched loop) knows
nothing else of what drafts: it asks the rounds which of the target's hidden states to return and which features to
hand back (`TargetFeatures`), asks for a `Draft` (a chain, or a tree), verifies it, and tells the rounds the outcome.
One implementation, hf_dynaspec.drafting.round.SpeculationRound, for every drafter: its proposers
(hf_dynaspec.drafting.proposers, the copies in hf_dynaspec.drafting.lookup) offer, a policy chooses, the chosen one
drafts.

tests/test_architecture.py holds the round and every proposer to these protocols (names and parameters) and checks
that no loop reaches past them into a drafter. A round keeps no state between `propose` and `learn`: the `Draft`
carries its `RoundPlan` back to `learn`.

A `DraftTree`'s node 0 is the root (the newest committed token, not yet processed by the target); `parents[i] < i`
for every draft node and `parents[0] == -1`. A node at depth d continues at position `past_length + d` and attends
to the cached prefix, its ancestors and itself, never to its siblings: one forward over the tree then gives each
node the logits a plain forward over its own root-to-node path would (P: the cached prefix length).

Legend: N committed tokens, k draft tokens, F drafter features, n tree nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from hf_dynaspec.drafting.planning.core import NO_PLAN, Offer, RoundPlan


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


@dataclass
class Draft:
    """What a round of drafting hands to the verifier."""

    token_ids: torch.Tensor  # [1, k] target vocabulary ids
    # [1, k, V] float32 logits whose softmax is exactly the distribution each draft token was sampled from
    # (-inf outside the shortlist); None for point-mass drafts (greedy drafting, lookups, lattices).
    logits: torch.Tensor | None
    looked_up: bool = False  # the tokens are a prompt-lookup draft the drafter did not veto
    confidences: list[float] = field(default_factory=list)  # with a planner: top probability per drafted position
    # A tree (an EAGLE-2 tree round, any lattice round): its root the last committed token; `token_ids` then holds
    # its draft nodes `[1, n - 1]` in node order (not a sequence).
    tree: DraftTree | None = None
    # The ids the drafter's head scored at each drafted position (None: the whole vocabulary), for the statistics'
    # shortlist coverage; empty for drafts the drafter did not make.
    shortlists: list[torch.Tensor | None] = field(default_factory=list)
    # What the round chose to draft; `learn` gets it back with the draft, so a round keeps nothing between them.
    plan: RoundPlan = NO_PLAN


def chain_tree(root: torch.Tensor, tokens: torch.Tensor) -> DraftTree:
    """The root `[1]` and k drafted tokens `[k]` as a tree of one branch (node i's parent is node i - 1), built
    on their device from host sizes only."""
    size = tokens.shape[0] + 1
    positions = torch.arange(size, device=tokens.device)
    return DraftTree(token_ids=torch.cat([root, tokens]), parents=positions - 1, depths=positions,
                     max_depth=size - 1)


def host_tree(root: torch.Tensor, tokens: list[int], parents: list[int]) -> DraftTree:
    """The root `[1]` and draft nodes `tokens` (host ids) whose parents are `parents` (0 = the root; node i + 1 is
    draft i): the tree chosen on the host, uploaded in one copy (tokens, parents, depths together: each upload is
    a stream sync on CUDA)."""
    parents = [-1] + list(parents)
    depths = depths_of(parents)
    n = len(tokens)
    values = torch.tensor([*tokens, *parents, *depths], dtype=torch.long).to(root.device)
    token_ids = torch.cat([root, values[:n].to(root.dtype)])
    return DraftTree(token_ids, values[n : 2 * n + 1], values[2 * n + 1 :], max(depths))


@dataclass(frozen=True)
class RoundContext:
    """What a round's proposers read: the committed ids `[1, N]` (the last one the root), the drafter's features of
    the positions verified last `[1, T, F]`, and `room`, the deepest draft the call still has room for."""

    input_ids: torch.Tensor
    hidden: torch.Tensor
    room: int


@runtime_checkable
class Proposer(Protocol):
    """One source of drafts (hf_dynaspec.drafting.proposers). `reads_features`: it drafts from the drafter's
    features (a model); False: a copy, which costs nothing to offer and lets the verified positions wait
    (`absorb`)."""

    reads_features: bool

    def offer(self, context: RoundContext) -> list[Offer]:
        """What it offers this round (cheap: a copy's tokens and match, a chain's cap); [] for nothing."""

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        """The plan's draft (`plan.offer` is one of this proposer's), carrying the plan back for `learn`."""

    def absorb(self, context: RoundContext) -> None:
        """The round drafts no model tokens: catch up on (or keep waiting) the verified positions."""


@runtime_checkable
class TargetFeatures(Protocol):
    """What the target's verification pass must return for the drafter, and what of it the drafter reads."""

    def hidden_state_selection(self):
        """`output_hidden_states=` for the target's forward (a bool, or the layers the drafter reads)."""

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The forward's hidden states -> the drafter's features `[B, T, F]` of its positions."""


@runtime_checkable
class DraftingRound(TargetFeatures, Protocol):
    """One generate() call's rounds for one sequence (a batch has one per row)."""

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, room: int, rows: int = 1) -> Draft:
        """The next draft continuing `input_ids` `[1, N]` (its last token is the root), from the features of the
        positions verified last `[1, T, F]`; at most `room` draft tokens deep (room < 1: no draft); `rows`: the
        batch's active rows, which share the verify forward the draft is priced by."""

    def learn(self, draft: Draft, committed_ids: torch.Tensor, num_accepted: int,
              accepted_nodes: list[int] | None = None) -> None:
        """The verified outcome of `draft` (the last `propose`'s): `committed_ids` `[1, N']` ends with the
        `num_accepted` accepted draft tokens and the target's own token; `accepted_nodes`: a tree's accepted nodes
        (root excluded)."""

    def finish(self) -> None:
        """The sequence is done (a batch row that stopped, or the call's end)."""
