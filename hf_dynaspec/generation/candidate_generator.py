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
from hf_dynaspec.drafting.lookup import RequestView
from hf_dynaspec.drafting.planner import SpeculationPlanner, TreeShape
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.drafting.runtime import planner_memory, runtime_head, suffix_cache
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.checks import check_chain_inputs
from hf_dynaspec.generation.costs.round_costs import round_costs
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
    do_sample = bool(generation_config.do_sample)
    speculation = build_round(target, assistant, options, input_ids, logits_processor, do_sample,
                              draws_drafts=do_sample, eos_token_ids=_eos_token_ids_to_cut(generation_config,
                                                                                          input_ids.device))
    generator = EagleCandidateGenerator(assistant, speculation, max_length=generation_config.max_length)
    generator.block_verification = do_sample and options.verification == "block"
    return generator


def build_round(target, assistant, options, input_ids, logits_processor, do_sample: bool, draws_drafts: bool,
                eos_token_ids=None, with_trees: bool = False, stats=None, batch_row: bool = False) -> SpeculationRound:
    """The `SpeculationRound` of one generate() call on either route, begun on the prompt `input_ids` `[1, N]`.
    `draws_drafts`: the drafter samples its tokens from its distribution (the `assistant_model=` route when
    sampling, verified by speculative sampling); False drafts its most likely tokens (greedy calls, and the
    public route, whose tree verifier takes point-mass proposals). `do_sample` keys the planner's tables.
    `with_trees` (tree_generate, `draft_plan="auto"`): the planner may draft trees of the options' shape.
    `stats`: the call's statistics when several rounds share them (a batch: one round per row); else started.
    `batch_row`: one row of a batch: the suffix cache's request part is the row's own (`RequestView`)."""
    stats = start_stats(assistant) if stats is None else stats
    head = runtime_head(assistant, options)
    session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=draws_drafts,
                                logits_processor=logits_processor, head=head,
                                confidence=options.assistant_confidence_threshold)
    planner = trees = None
    if options.draft_plan == "auto":
        shape = TreeShape(options.tree_top_k, options.tree_depth, options.tree_total_tokens) if with_trees else None
        longest = max(options.auto_max_assistant_tokens, options.prompt_lookup_num_tokens,
                      options.suffix_cache_num_tokens, options.tree_total_tokens if with_trees else 0)
        planner = SpeculationPlanner(round_costs(target, assistant, options, head, longest),
                                     planner_memory(assistant, do_sample), options.auto_max_assistant_tokens, tree=shape)
        if with_trees:
            trees = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=shape.top_k,
                                     depth=shape.max_depth, total_tokens=shape.total_tokens, head=head, chain=session)
    suffix = suffix_cache(assistant, options)
    if suffix is not None and batch_row:
        suffix = RequestView(suffix)
    speculation = SpeculationRound(session, options, stats, planner=planner, suffix=suffix,
                                   eos_token_ids=eos_token_ids, collect_draft_tokens=assistant.collect_draft_tokens,
                                   trees=trees)
    speculation.begin(input_ids)
    return speculation


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

    def __init__(self, assistant, speculation: SpeculationRound, max_length: int):
        self.assistant = assistant
        self.round = speculation
        self.max_length = max_length
        self.model_kwargs_overrides = {"output_hidden_states": assistant.drafter.hidden_state_selection()}
        self.block_verification = False  # sampled drafts verified as a block (hf_dynaspec.generation.block_verify)

    def get_candidates(self, input_ids, model_outputs=None, is_first_iteration=False, **kwargs):
        if is_first_iteration or model_outputs is None:
            self.round.skip()
            return input_ids, None
        # Leave room for the target's own token after the drafts (as transformers' generators do).
        room = self.max_length - input_ids.shape[1] - 1
        target_hidden = self.assistant.drafter.select_target_hidden(model_outputs.hidden_states)
        draft = self.round.draft(input_ids, target_hidden, room)
        if not draft.token_ids.shape[1]:  # nothing drafted: a plain one-token pass
            return input_ids, None
        if self.block_verification:
            block_verify.mark_for_block_verification(draft.logits)
        return torch.cat([input_ids, draft.token_ids], dim=1), draft.logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        self.round.learn(input_ids, int(num_matches))
