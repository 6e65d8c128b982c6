"""The one contract between a decoding loop and a drafter's rounds: every drafter kind implements `DraftingRound`.

A loop (transformers' assisted loop through hf_dynaspec.generation.candidate_generator, the public loop, the
batched loop) knows nothing else of what drafts: it asks the rounds which of the target's hidden states to
return and which features to hand back (`TargetFeatures`), asks for a `Draft` (a chain, or a tree), verifies it,
and tells the rounds the outcome. Two implementations:

- `hf_dynaspec.drafting.round.EagleRound`: an EAGLE drafter's rounds (chains and EAGLE-2 trees, prompt
  lookup, the suffix cache, the planner);
- `hf_dynaspec.drafting.medusa.LatticeRound`: a lattice source's rounds (Medusa heads, a diffusion LM: chains,
  CPS paths, lattice trees, prompt lookup, the lattice planner).

tests/test_architecture.py holds both to this protocol (names and parameters) and checks that no loop reaches
past it into a drafter.

Legend: N committed tokens, k draft tokens, F drafter features, n tree nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from hf_dynaspec.drafting.tree_structure import DraftTree


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

    def as_tree(self, root: torch.Tensor) -> DraftTree:
        """The draft as the tree verifier reads it: its tree, or the chain under `root` `[1]` as one branch."""
        return self.tree if self.tree is not None else chain_tree(root, self.token_ids[0])


def chain_tree(root: torch.Tensor, tokens: torch.Tensor) -> DraftTree:
    """The root `[1]` and k drafted tokens `[k]` as a tree of one branch (node i's parent is node i - 1), built
    on their device from host sizes only."""
    size = tokens.shape[0] + 1
    positions = torch.arange(size, device=tokens.device)
    return DraftTree(token_ids=torch.cat([root, tokens]), parents=positions - 1, depths=positions,
                     max_depth=size - 1)


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

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, room: int) -> Draft:
        """The next draft continuing `input_ids` `[1, N]` (its last token is the root), from the features of the
        positions verified last `[1, T, F]`; at most `room` draft tokens deep (room < 1: no draft)."""

    def learn(self, committed_ids: torch.Tensor, num_accepted: int, accepted_nodes: list[int] | None = None) -> None:
        """The verified outcome of the last draft: `committed_ids` `[1, N']` ends with the `num_accepted` accepted
        draft tokens and the target's own token; `accepted_nodes`: a tree's accepted nodes (root excluded)."""

    def share_costs(self, rows: int) -> None:
        """In a batch of `rows` active rows: price the next draft as this row's share of the verify forward."""

    def finish(self) -> None:
        """The sequence is done (a batch row that stopped, or the call's end)."""
