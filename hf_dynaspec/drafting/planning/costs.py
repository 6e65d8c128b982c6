"""The cost tables the planners weigh draft lengths by: `RoundCosts` for the EAGLE drafter's rounds (measured by
hf_dynaspec.generation.costs.round_costs), `LatticeCosts` for the lattice sources' (hf_dynaspec.generation.costs
.lattice_costs). Seconds on this machine, for this pairing, dtype and thread count."""

from __future__ import annotations

from dataclasses import dataclass

from hf_dynaspec.drafting.planning.core import extrapolated_seconds


@dataclass
class RoundCosts:
    """Seconds of the parts of a round (see the module docstring); `verify_seconds[n]` for n = 0..max (index 0
    unused)."""

    verify_seconds: list[float]
    consume_seconds: float
    first_draft_seconds: float
    draft_step_seconds: float
    tree_step_seconds: float | None = None  # None: not measured (trees are then not planned)

    def verify(self, num_tokens: int) -> float:
        """Seconds of a target forward over `num_tokens` new tokens (extrapolated linearly past the table)."""
        return extrapolated_seconds(self.verify_seconds, num_tokens)

    def drafting(self, num_tokens: int) -> float:
        """Seconds to draft `num_tokens` tokens with the drafter, beyond the consume pass."""
        if num_tokens <= 0:
            return 0.0
        return self.first_draft_seconds + (num_tokens - 1) * self.draft_step_seconds


@dataclass
class LatticeCosts:
    """Seconds of a lattice round's parts on this machine (hf_dynaspec.generation.costs.lattice_costs measures them):
    `verify_seconds[n]` the target's forward over n new tokens (index 0 unused), `lattice_seconds` the source's
    scores for every position, `tree_seconds` the host search of a lattice tree."""

    verify_seconds: list[float]
    lattice_seconds: float
    tree_seconds: float

    def verify(self, num_tokens: int) -> float:
        """Seconds of a target forward over `num_tokens` new tokens (extrapolated linearly past the table)."""
        return extrapolated_seconds(self.verify_seconds, num_tokens)
