"""The rounds of a `DynaSpecAssistant`'s generate() call, built the same way on every route (`build_round`): the
proposers its options turn on, the policy, the call's host context.

Public API only: the public routes (hf_dynaspec.generation.speculative) import this, never the `assistant_model=`
adapter (hf_dynaspec.generation.candidate_generator), which subclasses transformers' candidate generator.
"""

from __future__ import annotations

from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.lattice import AdaptiveDraftLength
from hf_dynaspec.drafting.lookup import LookupSources, PromptLookup, RequestView, SuffixCacheProposer
from hf_dynaspec.drafting.planning.core import LONGEST_COPY, TreeShape
from hf_dynaspec.drafting.planning.fixed import FixedOrder
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.drafter import ChainProposer, TreeProposer
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.drafting.runtime import captured_draft, planner_memory, runtime_head, suffix_cache
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.costs.round_costs import round_costs
from hf_dynaspec.stats import start_stats


def build_round(target, assistant, options, input_ids, logits_processor, do_sample: bool, draws_drafts: bool,
                eos_token_ids=None, with_trees: bool = False, stats=None, batch_row: bool = False) -> SpeculationRound:
    """The `SpeculationRound` of one generate() call on either route, begun on the prompt `input_ids` `[1, N]`.
    `draws_drafts`: the drafter samples its tokens from its distribution (the `assistant_model=` route when
    sampling, verified by speculative sampling); False drafts its most likely tokens (greedy calls, and the
    public route, whose tree verifier takes point-mass proposals). `do_sample` keys the planner's tables.
    `with_trees` (`trees=True`): EAGLE-2 trees of the options' shape, every round with a fixed plan (nothing is
    looked up then), among the planner's candidates with `draft_plan="auto"`. `stats`: the call's statistics when
    several rounds share them (a batch: one round per row); else started. `batch_row`: one row of a batch: the
    suffix cache's request part is the row's own (`RequestView`). A drafter-free assistant's proposers are the
    copies alone."""
    stats = start_stats(assistant) if stats is None else stats
    planned = options.draft_plan == "auto"
    with_trees = with_trees and assistant.has_drafter  # a drafter-free assistant's rounds are copies
    if with_trees and not planned:
        options = options.with_options(prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    suffix = suffix_cache(assistant, options)
    sources = LookupSources(options.prompt_lookup_num_tokens > 0, RequestView(suffix) if suffix is not None and batch_row else suffix)
    proposers, head = _drafter_proposers(assistant, options, logits_processor, draws_drafts, with_trees)
    vocab_size = assistant.config.vocab_size
    lookup = (PromptLookup(sources, LONGEST_COPY if planned else options.prompt_lookup_num_tokens, vocab_size,
                           draws_drafts, options.prompt_lookup_min_ngram, options.max_matching_ngram_size)
              if options.prompt_lookup_num_tokens > 0 else None)
    cache = (SuffixCacheProposer(sources, LONGEST_COPY if planned else options.suffix_cache_num_tokens, vocab_size,
                                 draws_drafts) if suffix is not None else None)
    # A planner reads ties in this order; a fixed order prefers the suffix cache's copy to prompt lookup's.
    copies = [lookup, cache] if planned else [cache, lookup]
    proposers = [proposer for proposer in proposers + copies if proposer is not None]
    if planned:
        longest = longest_draft(assistant, options, with_trees)
        policy = SpeculationPlanner(round_costs(target, assistant, options, head, longest),
                                    planner_memory(assistant, do_sample))
    else:
        adaptive = (AdaptiveDraftLength(k_min=1, k_max=options.num_assistant_tokens)
                    if options.draft_plan == "adl" and not with_trees else None)
        policy = FixedOrder(stats, options.prompt_lookup_veto, adaptive)
    speculation = SpeculationRound(proposers, policy, stats, assistant.drafter, sources, eos_token_ids,
                                   assistant.collect_draft_tokens)
    speculation.begin(input_ids)
    return speculation


def _drafter_proposers(assistant, options, logits_processor, draws_drafts: bool, with_trees: bool):
    """(the drafter's proposers: its chain, and its trees with `with_trees`; the shortlist head they score
    through): none for a drafter-free assistant. A fixed plan with trees drafts the configured tree every round."""
    if not assistant.has_drafter:
        return [], None
    head = runtime_head(assistant, options)
    session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=draws_drafts,
                                logits_processor=logits_processor, head=head,
                                confidence=options.assistant_confidence_threshold,
                                captured=captured_draft(assistant, options, head))
    planned = options.draft_plan == "auto"
    chain = ChainProposer(session, options.auto_max_assistant_tokens if planned else options.num_assistant_tokens)
    if not with_trees:
        return [chain], head
    trees = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=options.tree_top_k,
                             depth=options.tree_depth, total_tokens=options.tree_total_tokens, head=head, chain=session)
    tree = TreeProposer(trees, TreeShape(options.tree_top_k, options.tree_depth, options.tree_total_tokens))
    return ([chain, tree] if planned else [tree]), head


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
