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
from transformers.utils import logging

import hf_dynaspec.generation.block_verify as block_verify
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.checks import check_chain_inputs
from hf_dynaspec.generation.rounds import build_round, longest_draft
from hf_dynaspec.modeling.options import DynaSpecGenerationConfig

PUBLIC_ROUTE = "model.generate(..., custom_generate=hf_dynaspec.speculative_generate, drafter=assistant)"
logger = logging.get_logger(__name__)

TRANSFORMERS_CROPS_AT_EOS = version.Version(transformers.__version__) >= version.Version("5.18.0")
# transformers < 5.18 keeps the assisted loop's match count on the device, and every layer's cache crop reads it:
# benchmarks/assisted_syncs.py counted 81.5 host syncs per target pass at 24 layers on 5.17 against 17 on 5.24
# (CPU, the sync counter; docs/gpu.md). On a GPU each one stalls the host.
GPU_TRANSFORMERS_WARNING = (
    "transformers {found} syncs the GPU in every layer's cache crop of the assistant_model= route (about 2 per layer "
    "per target pass); upgrade to transformers>=5.18, or use the public route: " + PUBLIC_ROUTE)

# transformers' assisted loop owns the target's cache on the assistant_model= route: the static round (a StaticCache
# written by position, compiled per width) is the public routes' loop only. Said rather than ignored in silence.
STATIC_ROUND_WARNING = (
    "verify_round='static' applies to the public routes (custom_generate=speculative_generate); the "
    "assistant_model= route runs transformers' assisted loop, which verifies eagerly: use " + PUBLIC_ROUTE)


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
    warn_if_gpu_crops_sync(input_ids.device)
    check_chain_inputs(input_ids, generation_config, model_kwargs, assistant.config.vocab_size)
    options = call_options(assistant, generation_config)
    if options.verify_round == "static":
        logger.warning_once(STATIC_ROUND_WARNING)
    do_sample = bool(generation_config.do_sample)
    speculation = build_round(target, assistant, options, input_ids, logits_processor, do_sample,
                              draws_drafts=do_sample, eos_token_ids=_eos_token_ids_to_cut(generation_config,
                                                                                          input_ids.device))
    generator = EagleCandidateGenerator(assistant, speculation, max_length=generation_config.max_length,
                                        longest_draft=longest_draft(assistant, options))
    generator.block_verification = do_sample and options.verification in ("block", "auto") and block_verify.WRAPPED
    return generator


def warn_if_gpu_crops_sync(device: torch.device) -> None:
    """Once per process: a GPU call of the assistant_model= route on a transformers release whose crops sync."""
    if device.type == "cuda" and not TRANSFORMERS_CROPS_AT_EOS:
        logger.warning_once(GPU_TRANSFORMERS_WARNING.format(found=transformers.__version__))


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
    """transformers' candidate-generator contract over `SpeculationRound` (hf_dynaspec.drafting.round), fed with
    the target's verification outputs.

    The first call returns no candidates so that the target runs the prefill (and returns its hidden states);
    every later call drafts one round from the hidden states of the pass that just verified.
    """

    requires_model_outputs = True

    def __init__(self, assistant, speculation: SpeculationRound, max_length: int, longest_draft: int):
        self.assistant = assistant
        self.round = speculation
        self.max_length = max_length
        self.longest_draft = longest_draft
        self.model_kwargs_overrides = {"output_hidden_states": speculation.hidden_state_selection()}
        self.block_verification = False  # sampled drafts verified as a block (hf_dynaspec.generation.block_verify)
        self.draft = None  # the draft being verified, handed back to the round's `learn` (None: the prefill)

    @property
    def num_drafting_tokens(self) -> int:
        """The most tokens a round drafts (transformers >= 5.25 reads it to keep a linear-attention cache's
        recurrent states for rolling back rejected drafts)."""
        return self.longest_draft

    def get_candidates(self, input_ids, model_outputs=None, is_first_iteration=False, **kwargs):
        if is_first_iteration or model_outputs is None:
            self.draft = None
            return input_ids, None
        # Leave room for the target's own token after the drafts (as transformers' generators do).
        room = self.max_length - input_ids.shape[1] - 1
        target_hidden = self.round.select_target_hidden(model_outputs.hidden_states)
        draft = self.draft = self.round.propose(input_ids, target_hidden, room)
        drafted = draft.token_ids.shape[1]
        if not drafted and not self.block_verification:  # nothing drafted: a plain one-token pass
            return input_ids, None
        # Nothing drafted under block verification: empty marked logits `[1, 0, V]`, whose token
        # hf_dynaspec.generation.block_verify draws on the few tokens a top-k left (transformers would sample it).
        logits = draft.logits if drafted else torch.empty((1, 0, self.assistant.config.vocab_size),
                                                          device=input_ids.device)
        if self.block_verification:
            block_verify.mark_for_block_verification(logits)
        return torch.cat([input_ids, draft.token_ids], dim=1), logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        if self.draft is not None:
            self.round.learn(self.draft, input_ids, int(num_matches))
