"""The one module that touches transformers' private generation API.

`model.generate(assistant_model=assistant)` builds its candidate generator in the private
`GenerationMixin._get_candidate_generator`, from a fixed list with no registry. `install()` wraps that method
so that a `DynaSpecAssistant` gets our `EagleCandidateGenerator`; every other assistant goes to the original.
It also wraps `_validate_generation_mode`: where transformers would drop an assistant without an error (beam
search, with only a log line), a `DynaSpecAssistant` is refused with the reason.
Our generator uses the public-since-5.8 channel `requires_model_outputs` / `model_kwargs_overrides`, through
which transformers hands over the hidden states of the verification pass that already ran (no extra target
forward). Install and uninstall are safe to repeat.
"""

from __future__ import annotations

import functools
import warnings

import torch
import transformers
from packaging import version
from transformers.generation.candidate_generator import CandidateGenerator
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.utils import GenerationMixin

from hf_dynaspec.drafting import ChainDraftSession
from hf_dynaspec.lookup import lookup_continuation

# The range whose private API this module was written against and tested on.
TESTED_TRANSFORMERS = (version.Version("5.23.0"), version.Version("5.24.0"))
MIN_TRANSFORMERS = version.Version("5.8.0")  # `requires_model_outputs` appeared in 5.8

_ORIGINAL = "_dynaspec_original_get_candidate_generator"
_ORIGINAL_VALIDATE = "_dynaspec_original_validate_generation_mode"


def check_transformers_version() -> None:
    found = version.Version(transformers.__version__)
    if found < MIN_TRANSFORMERS:
        raise ImportError(
            f"hf-dynaspec needs transformers >= {MIN_TRANSFORMERS} (found {found}): "
            "pip install -U 'transformers>=5.23,<5.24'"
        )
    low, high = TESTED_TRANSFORMERS
    if not low <= found < high:
        warnings.warn(
            f"hf-dynaspec was tested with transformers >={low},<{high}; found {found}. "
            "Assisted generation uses a private transformers hook; check outputs with hf_dynaspec.check_exactness.",
            stacklevel=3,
        )


def install() -> None:
    """Route `generate(assistant_model=<DynaSpecAssistant>)` to our candidate generator. Idempotent."""
    if hasattr(GenerationMixin, _ORIGINAL):
        return
    check_transformers_version()
    original = GenerationMixin._get_candidate_generator

    @functools.wraps(original)
    def _get_candidate_generator(self, *args, **kwargs):
        from hf_dynaspec.assistant import DynaSpecAssistant

        assistant = kwargs.get("assistant_model")
        if not isinstance(assistant, DynaSpecAssistant):
            return original(self, *args, **kwargs)
        return assistant.make_candidate_generator(
            target=self,
            input_ids=kwargs["input_ids"],
            generation_config=kwargs["generation_config"],
            logits_processor=kwargs["logits_processor"],
            model_kwargs=kwargs["model_kwargs"],
        )

    setattr(GenerationMixin, _ORIGINAL, original)
    GenerationMixin._get_candidate_generator = _get_candidate_generator

    original_validate = GenerationMixin._validate_generation_mode

    @functools.wraps(original_validate)
    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs, *args, **kwargs):
        from hf_dynaspec.assistant import DynaSpecAssistant

        assistant = (generation_mode_kwargs or {}).get("assistant_model")
        if isinstance(assistant, DynaSpecAssistant) and generation_mode != GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"these generate() options select {generation_mode} (num_beams={generation_config.num_beams}), which "
                "cannot use an assistant: transformers would drop it and decode without it. Assisted decoding is "
                "greedy or sampled decoding: set num_beams=1, or drop assistant_model for beam search."
            )
        return original_validate(self, generation_mode, generation_config, generation_mode_kwargs, *args, **kwargs)

    setattr(GenerationMixin, _ORIGINAL_VALIDATE, original_validate)
    GenerationMixin._validate_generation_mode = _validate_generation_mode


def uninstall() -> None:
    """Restore transformers' own method. Idempotent."""
    original = GenerationMixin.__dict__.get(_ORIGINAL)
    if original is None:
        return
    GenerationMixin._get_candidate_generator = original
    delattr(GenerationMixin, _ORIGINAL)
    original_validate = GenerationMixin.__dict__.get(_ORIGINAL_VALIDATE)
    if original_validate is not None:
        GenerationMixin._validate_generation_mode = original_validate
        delattr(GenerationMixin, _ORIGINAL_VALIDATE)


def is_installed() -> bool:
    return hasattr(GenerationMixin, _ORIGINAL)


class EagleCandidateGenerator(CandidateGenerator):
    """transformers' candidate-generator contract, fed with the target's verification outputs.

    The first call returns no candidates so that the target runs the prefill (and returns its hidden
    states); every later call drafts from the hidden states of the pass that just verified. With the config's
    `prompt_lookup_tokens`, a round first tries prompt lookup (hf_dynaspec.lookup) and runs the drafter only
    when the context's last n-gram has no earlier occurrence (or, with `prompt_lookup_veto`, when the drafter
    overrules the lookup draft's first token); the drafter's cache still absorbs every verified position, so it
    is ready whenever it is needed next.
    """

    requires_model_outputs = True

    def __init__(self, assistant, session: ChainDraftSession, num_draft_tokens: int, max_length: int):
        self.assistant = assistant
        self.session = session
        self.num_draft_tokens = num_draft_tokens
        self.max_length = max_length
        self.model_kwargs_overrides = {"output_hidden_states": assistant.target_hidden_state_selection()}
        # Tokens drafted for the pass being verified; None for the prefill, which is not a decoding pass.
        self._drafted_last_round: int | None = None
        self._looked_up_last_round = False

    def get_candidates(self, input_ids, model_outputs=None, is_first_iteration=False, **kwargs):
        self._looked_up_last_round = False
        if is_first_iteration or model_outputs is None:
            self._drafted_last_round = None
            return input_ids, None
        # Leave room for the target's own token after the drafts (as transformers' generators do).
        room = self.max_length - input_ids.shape[1] - 1
        budget = min(self.num_draft_tokens, room)
        if budget < 1:
            self._drafted_last_round = 0
            self.session.shortlists_of_last_draft = []
            return input_ids, None
        target_hidden = self.assistant.select_target_hidden(model_outputs.hidden_states)
        looked_up = self._look_up(input_ids, room)
        draft = self.session.propose(input_ids, target_hidden, budget, lookup=looked_up,
                                     lookup_veto=self.assistant.config.prompt_lookup_veto)
        self._looked_up_last_round = draft.looked_up
        if looked_up is not None and not draft.looked_up:
            self.assistant.stats.lookup_vetoes += 1
        self._drafted_last_round = draft.token_ids.shape[1]
        if not self._drafted_last_round:  # the drafter was not confident enough: a plain one-token pass
            return input_ids, None
        if self.assistant.collect_draft_tokens and not draft.looked_up:
            self.assistant.stats.draft_token_ids.append(draft.token_ids[0])
        return torch.cat([input_ids, draft.token_ids], dim=1), draft.logits

    def _look_up(self, input_ids: torch.Tensor, room: int) -> torch.Tensor | None:
        """Prompt-lookup draft `[1, n]` (1 <= n <= room) for `input_ids` `[1, N]`, or None (off, or no earlier
        match). Not capped by num_draft_tokens: a lookup draft costs nothing to make."""
        config = self.assistant.config
        if config.prompt_lookup_tokens <= 0:
            return None
        continuation = lookup_continuation(
            input_ids[0], min(config.prompt_lookup_tokens, room),
            config.prompt_lookup_min_ngram, config.prompt_lookup_max_ngram,
        )
        return continuation[None] if len(continuation) else None

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        if self._drafted_last_round is None:
            return
        stats = self.assistant.stats
        stats.record(self._drafted_last_round, int(num_matches), looked_up=self._looked_up_last_round)
        committed = input_ids[0, -(int(num_matches) + 1) :]  # the target's tokens at draft positions 0..n
        stats.record_shortlists(self.session.shortlists_of_last_draft, committed)
