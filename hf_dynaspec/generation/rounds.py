"""The EAGLE rounds of one generate() call, built the same way for every route (`build_round`).

Public API only: the public routes (hf_dynaspec.generation.speculative) import this, never the `assistant_model=`
adapter (hf_dynaspec.generation.candidate_generator), which subclasses transformers' candidate generator.
"""

from __future__ import annotations

from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.lookup import RequestView
from hf_dynaspec.drafting.no_drafter import NoDraftSession
from hf_dynaspec.drafting.planning.core import LONGEST_COPY, TreeShape
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.round import EagleRound
from hf_dynaspec.drafting.runtime import captured_draft, planner_memory, runtime_head, suffix_cache
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.costs.round_costs import round_costs
from hf_dynaspec.stats import start_stats


def build_round(target, assistant, options, input_ids, logits_processor, do_sample: bool, draws_drafts: bool,
                eos_token_ids=None, with_trees: bool = False, stats=None, batch_row: bool = False) -> EagleRound:
    """The `EagleRound` of one generate() call on either route, begun on the prompt `input_ids` `[1, N]`.
    `draws_drafts`: the drafter samples its tokens from its distribution (the `assistant_model=` route when
    sampling, verified by speculative sampling); False drafts its most likely tokens (greedy calls, and the
    public route, whose tree verifier takes point-mass proposals). `do_sample` keys the planner's tables.
    `with_trees` (`trees=True`, `draft_plan="auto"`): the planner may draft trees of the options' shape.
    `stats`: the call's statistics when several rounds share them (a batch: one round per row); else started.
    `batch_row`: one row of a batch: the suffix cache's request part is the row's own (`RequestView`). With
    `with_trees` and a fixed plan, every round drafts the configured tree, and nothing is looked up."""
    stats = start_stats(assistant) if stats is None else stats
    with_trees = with_trees and assistant.has_drafter  # a drafter-free assistant's rounds are lookup chains
    if with_trees and options.draft_plan != "auto":
        options = options.with_options(prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    session, head = _session(assistant, options, logits_processor, draws_drafts)
    planner = trees = None
    if options.draft_plan == "auto":
        shape = TreeShape(options.tree_top_k, options.tree_depth, options.tree_total_tokens) if with_trees else None
        longest = longest_draft(assistant, options, with_trees)
        planner = SpeculationPlanner(round_costs(target, assistant, options, head, longest),
                                     planner_memory(assistant, do_sample), options.auto_max_assistant_tokens, tree=shape,
                                     drafter=assistant.has_drafter)
    if with_trees:
        trees = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=options.tree_top_k,
                                 depth=options.tree_depth, total_tokens=options.tree_total_tokens, head=head,
                                 chain=session)
    suffix = suffix_cache(assistant, options)
    if suffix is not None and batch_row:
        suffix = RequestView(suffix)
    speculation = EagleRound(session, options, stats, planner=planner, suffix=suffix,
                                   eos_token_ids=eos_token_ids, collect_draft_tokens=assistant.collect_draft_tokens,
                                   trees=trees)
    speculation.begin(input_ids)
    return speculation


def longest_draft(assistant, options, with_trees: bool = False) -> int:
    """The most tokens one round of a call with these options may draft: the planner's cap (a drafter-free
    planner's longest copy) or K, each lookup source's length, and a tree's nodes (`with_trees`). The planner's
    verify table is measured up to it; transformers >= 5.25 keeps that many recurrent states of a linear-attention
    cache for rolling back rejected drafts."""
    if options.draft_plan == "auto":
        drafter = options.auto_max_assistant_tokens if assistant.has_drafter else LONGEST_COPY
    else:
        drafter = options.num_assistant_tokens if assistant.has_drafter else 0
    return max(drafter, options.prompt_lookup_num_tokens, options.suffix_cache_num_tokens,
               options.tree_total_tokens if with_trees else 0)


def _session(assistant, options, logits_processor, draws_drafts: bool):
    """(the round's session, the drafter's shortlist head): a `ChainDraftSession`, or a drafter-free assistant's
    `NoDraftSession` (no head)."""
    if not assistant.has_drafter:
        return NoDraftSession(assistant.drafter, assistant.config.vocab_size, do_sample=draws_drafts), None
    head = runtime_head(assistant, options)
    session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=draws_drafts,
                                logits_processor=logits_processor, head=head,
                                confidence=options.assistant_confidence_threshold,
                                captured=captured_draft(assistant, options, head))
    return session, head
