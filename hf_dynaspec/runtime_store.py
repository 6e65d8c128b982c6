"""The one place where every drafter kind keeps what it needs at run time that its artifact does not hold.

A `DynaSpecAssistant` keeps its built shortlist head, the planner's acceptance tables and the suffix cache;
`MedusaAssistant` heads (and any lattice source) the `draft_plan="auto"` planner's tables and the shortlist rows
gathered from their projection. All of it lives in one `RuntimeState` per drafter, in a weak mapping from the
drafter (`runtime_of`): nothing is written onto the `PreTrainedModel`, so copying, saving or pickling a drafter
never carries run-time state, and the state goes away with the drafter (tests/test_options.py checks that a
generate() call leaves every drafter kind's `__dict__` as it found it).

A leaf: the fields are filled by the layers that own their types (hf_dynaspec.drafting.runtime for the
assistant's, hf_dynaspec.modeling.medusa and hf_dynaspec.generation.medusa for the heads').
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RuntimeState:
    """What one drafter keeps between generate() calls that its artifact does not hold."""

    head: tuple | None = None  # an assistant's (key, built shortlist head, the tensors it was built from)
    planner_memories: dict[bool, Any] = field(default_factory=dict)  # the planner's tables, by do_sample
    suffix: Any = None  # an assistant's SuffixCache
    shortlist_rows: Any = None  # Medusa heads: their projection's shortlist rows `[1 or K, S, D]`
    captured: tuple | None = None  # an assistant's (key, CapturedChainDraft): compiled graphs live as long as it


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def runtime_of(drafter) -> RuntimeState:
    """The drafter's run-time state (created on first use)."""
    state = _STATES.get(drafter)  # (not setdefault: a round asks, and a fresh state each time would be garbage)
    if state is None:
        state = _STATES[drafter] = RuntimeState()
    return state


def forget_learnt_state(drafter) -> None:
    """Forget what the drafter learnt in earlier generate() calls (the planners' tables, the suffix cache's
    outputs), keeping what it built (the shortlist head, the gathered rows): the next call is a first call again.
    A benchmark's warm-up on the prompt it then measures would otherwise hand the measured call its own output
    through the suffix cache and its planner's tables."""
    state = _STATES.get(drafter)
    if state is not None:
        state.planner_memories.clear()
        state.suffix = None
