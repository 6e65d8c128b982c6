"""The lattice sources' route into `speculative_generate` (`lattice_route`): Medusa heads, or a diffusion LM
(hf_dynaspec.drafting.diffusion.DiffusionDrafter).

    from hf_dynaspec import MedusaAssistant, speculative_generate
    heads = MedusaAssistant.from_pretrained(path, target=model)   # ours, FasterDecoding's or vLLM's layout
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=heads)   # as heads.generation_config says
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=heads, draft_plan="auto")  # per call

Each round the source drafts a lattice (Medusa: from the target's last hidden state of the previous pass;
hf_dynaspec.drafting.proposers.lattice picks the chain, CPS path or tree) and the one loop verifies it in one target forward
(hf_dynaspec.generation.batched_loop). Medusa's "typical acceptance" is lossy and not offered: acceptance is the
tree verifier's, exact.
"""

from __future__ import annotations

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.drafting.lattice import AdaptiveDraftLength, NgramScorer
from hf_dynaspec.drafting.lookup import LookupSources, PromptLookup
from hf_dynaspec.drafting.planning.core import TreeShape
from hf_dynaspec.drafting.planning.fixed import FixedOrder
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.lattice import (
    LatticeChain,
    LatticeDraft,
    LatticeReader,
    LatticeTree,
    lattice_memory,
)
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.drafting.runtime import planner_memory
from hf_dynaspec.errors import AssistantMismatchError
from hf_dynaspec.generation.batched_loop import run_batched_rounds
from hf_dynaspec.generation.costs.lattice_costs import lattice_round_costs
from hf_dynaspec.generation.public_loop import check_public_inputs
from hf_dynaspec.modeling.medusa_options import MedusaGenerationConfig
from hf_dynaspec.stats import start_stats


def lattice_route(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter, trees: bool,
                  call_options: dict, model_kwargs: dict):
    """A lattice source's rounds (`speculative_generate`'s route for a `MedusaAssistant` or a `DiffusionDrafter`):
    options from the source's `generation_config` (`MedusaGenerationConfig`), `call_options` overriding them for
    this call (the entry's `tree_depth` is the lattice's `num_assistant_tokens`). `trees` does not apply: the
    options' `lattice_draft` says whether a lattice round drafts a chain, a path or a tree."""
    heads = _attached(drafter, model)
    config = getattr(heads, "generation_config", None)
    config = config if isinstance(config, MedusaGenerationConfig) else MedusaGenerationConfig()
    renamed = {"num_assistant_tokens" if name == "tree_depth" else name: value for name, value in call_options.items()}
    options = config.with_options(**renamed)  # a checked copy (options may be set one by one since loading)
    batch = check_public_inputs(model, heads, input_ids, generation_config, model_kwargs)
    depth = (heads.num_positions if options.num_assistant_tokens is None
             else min(options.num_assistant_tokens, heads.num_positions))
    planner = _planner(model, heads, options, depth, bool(generation_config.do_sample))
    stats, vocab_size = start_stats(heads), model.get_output_embeddings().weight.shape[0]

    def rounds_for(prompt_ids, processors):  # one per prompt of a batch: its own context, ADL and n-gram scorer
        return lattice_round(heads, options, depth, planner, stats, vocab_size)

    return run_batched_rounds(model, input_ids, batch, logits_processor, stopping_criteria, generation_config,
                              rounds_for, model_kwargs)


def lattice_round(source, options: MedusaGenerationConfig, depth: int, planner: SpeculationPlanner | None, stats,
                  vocab_size: int) -> SpeculationRound:
    """One row's rounds: the options' fixed kind of lattice draft (ADL's depth with `draft_plan="adl"`), or with
    `planner` the lattice's chain and tree and prompt lookup, planned."""
    scorer = NgramScorer(vocab_size, order=options.ngram_order) if options.uses_context else None
    reader = LatticeReader(source, options, depth, scorer)
    lookup = planner is not None and options.prompt_lookup_num_tokens > 0
    sources = LookupSources(lookup or scorer is not None, scorer=scorer)
    if planner is None:
        if options.lattice_kind == "auto":
            raise ValueError("draft='auto' drafts through a SpeculationPlanner, and only it does")
        adaptive = (AdaptiveDraftLength(k_min=1, k_max=max(depth, 1), rho=options.adl_rho, delta=options.adl_delta)
                    if options.draft_plan == "adl" else None)
        return SpeculationRound([LatticeDraft(reader, options.lattice_kind)], FixedOrder(stats, adaptive=adaptive),
                                stats, source, sources)
    chain = LatticeChain(reader)
    tree = LatticeTree(reader, chain, TreeShape(options.tree_top_k, depth, options.tree_total_tokens))
    # A copy is offered as deep as the lattice reads (it competes with the lattice's chains).
    copies = [PromptLookup(sources, min(options.prompt_lookup_num_tokens, depth), vocab_size)] if lookup else []
    return SpeculationRound([chain, tree, *copies], planner, stats, source, sources)


def _planner(model, source, options: MedusaGenerationConfig, depth: int, do_sample: bool) -> SpeculationPlanner | None:
    """`draft="auto"`'s planner: this machine's measured costs, the source's tables for this decoding mode (kept
    across calls in the source's run-time state: a planner learns the workload)."""
    if options.lattice_kind != "auto":
        return None
    stored = getattr(getattr(source, "config", None), "expected_acceptance", None)  # measured with the heads
    memory = planner_memory(source, do_sample, stored, make=lattice_memory)
    costs = lattice_round_costs(model, source, options, max(depth, options.tree_total_tokens))
    return SpeculationPlanner(costs, memory)


def _attached(heads, model):
    """The source, attached to `model` (a diffusion LM follows the call's target; heads attached to another model
    object are refused)."""
    if isinstance(heads, DiffusionDrafter):
        return heads.attach(model) if heads.target is not model else heads
    if heads.target is None:
        return heads.attach(model)
    if heads.target is not model:
        raise AssistantMismatchError("these Medusa heads are attached to another model object: call "
                                     "heads.attach(model) first")
    weight = model.get_output_embeddings().weight
    first = next(heads.parameters())
    if first.dtype != model.dtype or first.device != weight.device:
        heads.attach(model)  # the target was cast or moved since: follow it
    return heads
