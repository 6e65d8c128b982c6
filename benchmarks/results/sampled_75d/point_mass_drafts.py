"""#75 experiment (not shipped as is): under sampling, the drafter drafts its most likely tokens (point masses,
q = one-hot) instead of drawing from its processed distribution, and every draft, lookup ones too, goes to the
block rule with one-hot q. Exact for any deterministic draft (q is the draft's true distribution). Runs
`hf-dynaspec bench` in this process with the change patched in; the arguments are the bench's.

Usage: python benchmarks/results/sampled_75d/point_mass_drafts.py BENCH-ARGS...
"""

import sys

import torch

import hf_dynaspec.generation.candidate_generator as cg
from hf_dynaspec.generation import block_verify

_build_round = cg.build_round


def build_round(target, assistant, options, input_ids, logits_processor, do_sample, draws_drafts, **kwargs):
    # argmax drafts of the drafter's raw scores: the greedy (captured) draft, no processors on the drafter's rows
    return _build_round(target, assistant, options, input_ids, None if draws_drafts else logits_processor, do_sample,
                        draws_drafts=False, **kwargs)


def get_candidates(self, input_ids, model_outputs=None, is_first_iteration=False, **kwargs):
    if is_first_iteration or model_outputs is None:
        self.round.skip()
        return input_ids, None
    room = self.max_length - input_ids.shape[1] - 1
    draft = self.round.propose(input_ids, self.round.select_target_hidden(model_outputs.hidden_states), room)
    if not draft.token_ids.shape[1]:
        return input_ids, self._nothing_drafted(input_ids)
    logits = draft.logits
    if self.block_verification and logits is None:  # a point mass at each drafted token
        tokens = draft.token_ids[0]
        logits = torch.full((1, tokens.shape[0], self.assistant.config.vocab_size), float("-inf"),
                            device=input_ids.device)
        logits[0, torch.arange(tokens.shape[0], device=tokens.device), tokens] = 0.0
    if self.block_verification:
        block_verify.mark_for_block_verification(logits)
    return torch.cat([input_ids, draft.token_ids], dim=1), logits


cg.build_round = build_round
cg.EagleCandidateGenerator.get_candidates = get_candidates

if __name__ == "__main__":
    from hf_dynaspec.cli import main

    sys.exit(main(sys.argv[1:]))
