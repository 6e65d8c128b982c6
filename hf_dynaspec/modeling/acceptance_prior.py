"""What a planner believes of a drafter before it has seen it draft: its measured acceptance.

A planner (`draft_plan="auto"`, Medusa's) learns acceptance per draft position, per confidence bin and
per tree depth from the rounds it drafts. With 16-128 new tokens a call is over before its tables say much, so the
starting point decides the first calls. A flat 0.5 at every position knows nothing of the drafter: a good
drafter on a host where verification is dear (AVX2 CPUs) would never draft. So an artifact carries the
acceptance measured when it was packaged (`hf_dynaspec.recipes.expected_acceptance` measures it on held-aside
prompts with its target), in its generation config as `expected_acceptance`, and a planner's Beta priors start
there with the weight of `weight` observed rounds; counts from this machine's rounds then take over.

Stored form (JSON, one entry per decoding mode measured, "greedy" and/or "sampled"):

    {"greedy": {"position": [a_1, ..., a_K], "confidence": [c_0, ..., c_9],
                "tree_depth": [t_1, ..., t_D], "tree_shape": [top_k, total_tokens],
                "rounds": R, "weight": 4.0}}

`position[j-1]`: P(draft position j accepted | position j reached); `confidence[b]`: the same for positions whose
top draft probability fell in bin b (tenths); `tree_depth[d-1]`: P(the accepted path of an EAGLE-2 tree of
`tree_shape` passes depth d | it reached depth d - 1). Positions past the list take its last value.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIDENCE_BINS = 10
DEFAULT_WEIGHT = 4.0  # pseudo-rounds: enough to plan the first round, few enough for a workload to overrule
MODES = ("greedy", "sampled")


@dataclass(frozen=True)
class AcceptancePrior:
    """Measured acceptance of one drafter in one decoding mode (the module docstring says what each list holds)."""

    position: tuple[float, ...]
    confidence: tuple[float, ...] = ()
    tree_depth: tuple[float, ...] = ()
    tree_shape: tuple[int, int] | None = None
    rounds: int = 0
    weight: float = DEFAULT_WEIGHT

    def __post_init__(self):
        if not self.position:
            raise ValueError("an acceptance prior needs the acceptance of at least draft position 1")
        for name in ("position", "confidence", "tree_depth"):
            values = getattr(self, name)
            if not all(isinstance(v, (int, float)) and 0.0 <= v <= 1.0 for v in values):
                raise ValueError(f"expected_acceptance {name} must hold probabilities in [0, 1]; got {list(values)!r}")
        if self.confidence and len(self.confidence) != CONFIDENCE_BINS:
            raise ValueError(f"expected_acceptance confidence must have {CONFIDENCE_BINS} bins (tenths); got "
                             f"{len(self.confidence)}")
        if self.tree_depth and (self.tree_shape is None or len(self.tree_shape) != 2):
            raise ValueError("expected_acceptance tree_depth needs tree_shape [top_k, total_tokens]")
        if not (isinstance(self.weight, (int, float)) and self.weight > 0):
            raise ValueError(f"expected_acceptance weight must be a positive number of rounds; got {self.weight!r}")

    def at_position(self, position: int) -> float:
        """a_j for draft position `position` (1-based)."""
        return self.position[min(position, len(self.position)) - 1]

    def at_tree_depth(self, top_k: int, total_tokens: int, depth: int) -> float | None:
        """The tree table's value for a tree of this shape (None: measured for another shape, or not at all)."""
        if not self.tree_depth or tuple(self.tree_shape) != (top_k, total_tokens):
            return None
        return self.tree_depth[min(depth, len(self.tree_depth)) - 1]

    def to_dict(self) -> dict:
        out = {"position": [round(v, 4) for v in self.position], "rounds": self.rounds, "weight": self.weight}
        if self.confidence:
            out["confidence"] = [round(v, 4) for v in self.confidence]
        if self.tree_depth:
            out |= {"tree_depth": [round(v, 4) for v in self.tree_depth], "tree_shape": list(self.tree_shape)}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> AcceptancePrior:
        unknown = set(data) - {"position", "confidence", "tree_depth", "tree_shape", "rounds", "weight"}
        if unknown:
            raise ValueError(f"expected_acceptance has unknown keys {sorted(unknown)}")
        shape = data.get("tree_shape")
        return cls(position=tuple(data["position"]), confidence=tuple(data.get("confidence", ())),
                   tree_depth=tuple(data.get("tree_depth", ())), tree_shape=tuple(shape) if shape else None,
                   rounds=int(data.get("rounds", 0)), weight=float(data.get("weight", DEFAULT_WEIGHT)))


def priors_from_config(stored: dict | None) -> dict[str, AcceptancePrior]:
    """`expected_acceptance` of a generation config (None: an artifact packaged before it existed) -> the prior
    of each decoding mode it measured. Raises `ValueError` naming the fault for a malformed entry."""
    if stored is None:
        return {}
    if not isinstance(stored, dict) or set(stored) - set(MODES):
        raise ValueError(f"expected_acceptance must map {MODES} to measured acceptance; got {stored!r}. Re-measure "
                         "it with hf_dynaspec.recipes.expected_acceptance or set it to None.")
    return {mode: AcceptancePrior.from_dict(entry) for mode, entry in stored.items()}


def prior_for(stored: dict | None, do_sample: bool) -> AcceptancePrior | None:
    """The prior of the decoding mode (`do_sample`), None where that mode was not measured."""
    return priors_from_config(stored).get("sampled" if do_sample else "greedy")
