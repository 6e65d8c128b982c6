"""Chain drafting inside transformers' assisted generation: a `CandidateGenerator` fed with the target's outputs.

Our generator uses the channel `requires_model_outputs` / `model_kwargs_overrides` (transformers >= 5.8),
through which transformers hands over the hidden states of the verification pass that already ran (no extra
target forward).
"""

from __future__ import annotations

import torch
import transformers
from packaging import version
from transformers.generation.candidate_generator import CandidateGenerator

import hf_dynaspec.generation.block_verify as block_verify
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.lookup import lookup_match
from hf_dynaspec.drafting.planner import LookupCandidate, ProbeDrafting, RoundPlan, SpeculationPlanner
from hf_dynaspec.drafting.runtime import planner_memory, runtime_head, suffix_cache
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.calibration import round_costs
from hf_dynaspec.generation.checks import check_chain_inputs
from hf_dynaspec.modeling.options import DynaSpecGenerationConfig
from hf_dynaspec.stats import start_stats

TRANSFORMERS_CROPS_AT_EOS = version.Version(transformers.__version__) >= version.Version("5.18.0")


def call_options(assistant, generation_config) -> DynaSpecGenerationConfig:
    """The drafting options of one generate() call: `assistant.generation_config`.

    As for transformers' own assistants (AssistedCandidateGenerator reads `num_assistant_tokens` and
    `assistant_confidence_threshold` from the assistant model's generation config), per-call values of those
    fields are not read: generate() fills unset fields with transformers' global defaults (20 tokens, threshold
    0.4) before any candidate generator sees them, so a value set on the call cannot be told from a default.
    `prompt_lookup_num_tokens` has no such default: set on the call, it is refused with the fix rather than
    silently dropped."""
    if getattr(generation_config, "prompt_lookup_num_tokens", None) is not None:
        raise ValueError(
            "prompt_lookup_num_tokens was passed to generate() together with a DynaSpecAssistant: set it on the "
            "assistant instead (assistant.generation_config.prompt_lookup_num_tokens = N, or "
            "DynaSpecAssistant.from_pretrained(..., prompt_lookup_num_tokens=N)), so that lookup and the drafter "
            "share each round."
        )
    options = assistant.generation_config
    # Options may have been set one by one since loading (assistant.generation_config.draft_plan = ...): a typo
    # or a negative length must not run as some default.
    options.validate_options()
    return options


def make_candidate_generator(assistant, target, input_ids, generation_config, logits_processor, model_kwargs):
    """What `generate(assistant_model=assistant)` drafts with (called through hf_dynaspec.generation.hook)."""
    ensure_attached(assistant, target)
    check_chain_inputs(input_ids, generation_config, model_kwargs, assistant.config.vocab_size)
    options = call_options(assistant, generation_config)
    start_stats(assistant)
    head = runtime_head(assistant, options)
    do_sample = bool(generation_config.do_sample)
    session = ChainDraftSession(
        assistant.drafter,
        vocab_size=assistant.config.vocab_size,
        do_sample=do_sample,
        logits_processor=logits_processor,
        head=head,
        confidence=options.assistant_confidence_threshold,
    )
    planner = None
    if options.draft_plan == "auto":
        longest = max(options.auto_max_assistant_tokens, options.prompt_lookup_num_tokens,
                      options.suffix_cache_num_tokens)
        planner = SpeculationPlanner(round_costs(target, assistant, options, head, longest),
                                     planner_memory(assistant, do_sample), options.auto_max_assistant_tokens)
    suffix = suffix_cache(assistant, options)
    generator = EagleCandidateGenerator(assistant, session, options, max_length=generation_config.max_length,
                                        eos_token_ids=_eos_token_ids_to_cut(generation_config, input_ids.device))
    generator.planner, generator.suffix = planner, suffix
    generator.begin(input_ids)
    generator.block_verification = do_sample and options.verification == "block"
    return generator


def _as_ids(tokens: list[int], like: torch.Tensor) -> torch.Tensor:
    """Host token ids (a lookup draft) -> `[1, n]` with the dtype and device of `like` (the context's ids)."""
    return torch.tensor([tokens], dtype=like.dtype, device=like.device)


def _eos_token_ids_to_cut(generation_config, device: torch.device) -> torch.Tensor | None:
    """The call's EOS ids `[E]` on `device`, where drafts must end at an EOS themselves; else None.

    transformers >= 5.18 crops the accepted tokens at the first EOS in its own loop; earlier releases commit every
    accepted token and check the stopping criteria on the last one only. The cut costs a host sync per round, so
    it is made only where transformers does not crop."""
    if TRANSFORMERS_CROPS_AT_EOS:
        return None
    eos = getattr(generation_config, "_eos_token_tensor", None)
    if eos is None and generation_config.eos_token_id is not None:
        eos = torch.tensor(generation_config.eos_token_id)
    return None if eos is None or not eos.numel() else eos.reshape(-1).to(device)


class EagleCandidateGenerator(CandidateGenerator):
    """transformers' candidate-generator contract, fed with the target's verification outputs.

    The first call returns no candidates so that the target runs the prefill (and returns its hidden
    states); every later call drafts from the hidden states of the pass that just verified. With
    `prompt_lookup_num_tokens`, a round first tries prompt lookup (hf_dynaspec.drafting.lookup) and runs the
    drafter only when the context's last n-gram has no earlier occurrence (or, with `prompt_lookup_veto`, when
    the drafter overrules the lookup draft's first token); the drafter's cache still absorbs every verified
    position, so it is ready whenever it is needed next.
    """

    requires_model_outputs = True

    def __init__(self, assistant, session: ChainDraftSession, options: DynaSpecGenerationConfig, max_length: int,
                 eos_token_ids: torch.Tensor | None = None):
        self.assistant = assistant
        self.eos_token_ids = eos_token_ids
        self.session = session
        self.options = options
        self.max_length = max_length
        self.model_kwargs_overrides = {"output_hidden_states": assistant.drafter.hidden_state_selection()}
        # Tokens drafted for the pass being verified; None for the prefill, which is not a decoding pass.
        self._drafted_last_round: int | None = None
        self._looked_up_last_round = False
        self.planner: SpeculationPlanner | None = None  # draft_plan="auto"
        self.suffix = None  # the assistant's SuffixCache, or None (off)
        self.block_verification = False  # sampled drafts verified as a block (hf_dynaspec.generation.block_verify)
        self._plan = RoundPlan("none", 0)
        # Host copy of the committed ids while a lookup source is on: prompt lookup and the suffix cache search
        # it, so that on a device a round reads only the few ids committed since the last one.
        self._context: list[int] | None = None

    def begin(self, input_ids: torch.Tensor) -> None:
        """Start a generate() call on the prompt `[1, N]` (one read of the prompt when a lookup source is on)."""
        if self.options.prompt_lookup_num_tokens > 0 or self.suffix is not None:
            self._context = input_ids[0].tolist()
        if self.suffix is not None:
            self.suffix.begin_request(self._context)

    def get_candidates(self, input_ids, model_outputs=None, is_first_iteration=False, **kwargs):
        self._looked_up_last_round = False
        if is_first_iteration or model_outputs is None:
            self._drafted_last_round = None
            return input_ids, None
        self._read_committed(input_ids)
        # Leave room for the target's own token after the drafts (as transformers' generators do).
        room = self.max_length - input_ids.shape[1] - 1
        cap = self.options.num_assistant_tokens if self.planner is None else self.options.auto_max_assistant_tokens
        budget = min(cap, room)
        if budget < 1:
            self._drafted_last_round = 0
            self.session.shortlists_of_last_draft = []
            self._plan = RoundPlan("none", 0)
            return input_ids, None
        target_hidden = self.assistant.drafter.select_target_hidden(model_outputs.hidden_states)
        if self.planner is None:
            draft = self._fixed_round(input_ids, target_hidden, budget, room)
        else:
            draft = self._planned_round(input_ids, target_hidden, room)
        if draft is None:  # the planner drafts nothing: a plain one-token pass
            self._drafted_last_round = 0
            return input_ids, None
        draft = self._end_at_eos(draft)
        self._looked_up_last_round = draft.looked_up
        self._drafted_last_round = draft.token_ids.shape[1]
        if not self._drafted_last_round:  # the drafter was not confident enough: a plain one-token pass
            return input_ids, None
        if self.assistant.collect_draft_tokens and not draft.looked_up:
            self.assistant.stats.draft_token_ids.append(draft.token_ids[0])
        if self.block_verification:
            block_verify.mark_for_block_verification(draft.logits)
        return torch.cat([input_ids, draft.token_ids], dim=1), draft.logits

    def _fixed_round(self, input_ids, target_hidden, budget: int, room: int):
        """`draft_plan="fixed"`: a suffix-cache or prompt-lookup draft when there is one, else `budget` drafter
        tokens."""
        found = self.suffix.propose(min(self.options.suffix_cache_num_tokens, room)) if self.suffix else None
        looked_up = None if found is None else _as_ids(found.tokens, input_ids)
        self._plan = RoundPlan("suffix" if looked_up is not None else "prompt-lookup", 0)
        if looked_up is None:
            looked_up = self._look_up(input_ids, room)
        draft = self.session.propose(input_ids, target_hidden, budget, lookup=looked_up,
                                     lookup_veto=self.options.prompt_lookup_veto)
        if looked_up is not None and not draft.looked_up:
            self.assistant.stats.lookup_vetoes += 1
        if not draft.looked_up:
            self._plan = RoundPlan("drafter", 0)
        return draft

    def _planned_round(self, input_ids, target_hidden, room: int):
        """`draft_plan="auto"`: the planner picks the drafter, a lookup source or nothing (None)."""
        options, candidates, drafts = self.options, [], {}
        if options.prompt_lookup_num_tokens > 0:
            tokens, match = lookup_match(torch.tensor(self._context), min(options.prompt_lookup_num_tokens, room),
                                         options.prompt_lookup_min_ngram, options.max_matching_ngram_size)
            if match:
                candidates.append(LookupCandidate("prompt-lookup", match, len(tokens)))
                drafts["prompt-lookup"] = tokens.tolist()
        if self.suffix is not None:
            found = self.suffix.propose(min(options.suffix_cache_num_tokens, room))
            if found is not None:
                candidates.append(LookupCandidate(found.source, found.match_length, len(found.tokens)))
                drafts[found.source] = list(found.tokens)
        plan = self._plan = self.planner.plan_round(candidates, room)
        if plan.source == "none":
            self.session.shortlists_of_last_draft = []
            self.session.consume_verified(input_ids, target_hidden, plan=False)  # keep the drafter in step
            return None
        if plan.source != "drafter":
            # Only the chosen source's ids go to the device: one upload of a few ids.
            looked_up = _as_ids(drafts[plan.source][: plan.num_tokens], input_ids)
            return self.session.propose(input_ids, target_hidden, 1, lookup=looked_up)
        # A probe drafts exactly its length (the planner would cut it to nothing); others stop when the planner says.
        planner = ProbeDrafting() if plan.probe else self.planner
        capped = plan.probe or self.session.defer_host_decisions
        cap = plan.num_tokens if capped else min(self.planner.max_draft_tokens, room)
        draft = self.session.propose(input_ids, target_hidden, cap, planner=planner)
        plan.confidences = draft.confidences
        return draft

    def _read_committed(self, input_ids: torch.Tensor) -> None:
        """Bring the tokens committed since the last round to the host copy and the suffix cache (a read of a few
        ids; none when no lookup source is on)."""
        if self._context is None:
            return
        if input_ids.shape[1] > len(self._context):  # (shapes are host values: no read when nothing is new)
            new = input_ids[0, len(self._context) :].tolist()
            self._context.extend(new)
            if self.suffix is not None:
                self.suffix.extend(new)

    def _end_at_eos(self, draft):
        """Cut the draft after its first EOS, as transformers' own candidate generators end theirs: releases
        before 5.18 commit every accepted token and check the stopping criteria only on the last one, so tokens
        drafted past an EOS would be appended after it. The cut reads tokens already drawn and drops only
        positions that follow an EOS, whose tokens are never part of the output: sampling stays exact."""
        if self.eos_token_ids is None or not draft.token_ids.shape[1]:
            return draft
        is_eos = torch.isin(draft.token_ids[0], self.eos_token_ids)
        if not bool(is_eos.any()):
            return draft
        keep = int(is_eos.nonzero()[0, 0]) + 1
        logits = draft.logits[:, :keep] if draft.logits is not None else None
        return type(draft)(token_ids=draft.token_ids[:, :keep], logits=logits, looked_up=draft.looked_up)

    def _look_up(self, input_ids: torch.Tensor, room: int) -> torch.Tensor | None:
        """Prompt-lookup draft `[1, n]` (1 <= n <= room) for `input_ids` `[1, N]`, or None (off, or no earlier
        match). Not capped by num_assistant_tokens: a lookup draft costs nothing to make."""
        options = self.options
        if options.prompt_lookup_num_tokens <= 0:
            return None
        continuation, _ = lookup_match(
            torch.tensor(self._context), min(options.prompt_lookup_num_tokens, room),
            options.prompt_lookup_min_ngram, options.max_matching_ngram_size,
        )
        return _as_ids(continuation.tolist(), input_ids) if len(continuation) else None

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        self._read_committed(input_ids)
        if self._drafted_last_round is None:
            return
        stats = self.assistant.stats
        stats.record(self._drafted_last_round, int(num_matches), looked_up=self._looked_up_last_round,
                     source=self._plan.source if self._drafted_last_round else "none")
        if self.planner is not None:
            self.planner.record(self._plan, self._drafted_last_round, int(num_matches))
        committed = input_ids[0, -(int(num_matches) + 1) :]  # the target's tokens at draft positions 0..n
        stats.record_shortlists(self.session.shortlists_of_last_draft, committed)
