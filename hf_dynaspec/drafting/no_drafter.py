"""The session of a drafter-free assistant (`DynaSpecAssistant.for_target`): a round drafts a lookup copy or nothing.

`EagleRound` holds it where it would hold a `ChainDraftSession`; it answers the calls a round makes of a
session without a drafter behind them. A planned round never asks it for drafter tokens (the planner of a
drafter-free assistant has no drafter among its candidates, `SpeculationPlanner(drafter=False)`); a fixed round's
draft is the lookup draft, or nothing.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.contract import Draft
from hf_dynaspec.drafting.lookup import one_hot_logits


class NoDraftSession:
    """`drafter`: the assistant's `NoDrafter` (it reads no hidden states); `do_sample`: the verifier takes the
    drafts' distributions (`assistant_model=` when sampling): a lookup draft's is a point mass."""

    defer_host_decisions = False

    def __init__(self, drafter, vocab_size: int, do_sample: bool):
        self.drafter = drafter
        self.vocab_size = vocab_size
        self.do_sample = do_sample

    def lookup_draft(self, input_ids: torch.Tensor, new_target_hidden, lookup: torch.Tensor) -> Draft:
        logits = one_hot_logits(lookup, self.vocab_size) if self.do_sample else None
        return Draft(token_ids=lookup, logits=logits, looked_up=True)

    def defer_verified(self, input_ids: torch.Tensor, new_target_hidden) -> None:
        """Nothing to keep: no drafter will run over the verified positions."""

    def draft(self, input_ids: torch.Tensor, new_target_hidden, cap: int, rule=None) -> Draft:
        """A round with no lookup draft: none (a plain decoding step)."""
        return Draft(token_ids=input_ids.new_empty((1, 0)), logits=None)

    def overrules(self, input_ids: torch.Tensor, new_target_hidden, lookup_token: int, veto: float) -> bool:
        """No drafter to overrule a lookup draft."""
        return False
