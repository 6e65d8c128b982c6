"""`speculative_generate`: the one public `custom_generate` entry, for every drafter; no private transformers API.

    from hf_dynaspec import speculative_generate
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=assistant)              # chains
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=assistant, trees=True)  # EAGLE-2
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=heads)        # Medusa, diffusion LM

Which rounds a drafter drafts with is its kind's route, registered in `ROUTES` (one line per artifact class, read
along the drafter's class hierarchy): an EAGLE assistant's rounds (`eagle_route`: hf_dynaspec.drafting.round.SpeculationRound with
the drafter, prompt lookup, the suffix cache, the confidence stop and `draft_plan="auto"`, as the assistant's options
say; with `trees=True` EAGLE-2 trees, under `draft_plan="auto"` the planner's choice among trees, chains, lookups and
nothing), or a lattice source's (hf_dynaspec.generation.medusa.lattice_route). The one loop
(hf_dynaspec.generation.batched_loop; a prompt is a batch of one) verifies each draft as a tree, a chain being a
tree of one branch. Drafts are point-mass proposals, accepted by recursive rejection: greedy output identical to
plain `generate()`, sampling exact (tests/test_chain_generate.py, tests/test_tree.py, tests/test_medusa.py). It is
also the fallback for a transformers release that moves the private method the `assistant_model=` route wraps
(hf_dynaspec.generation.hook). The names of earlier releases (`chain_generate`, `tree_generate`, `medusa_generate`,
`lattice_generate`) are deprecated aliases (hf_dynaspec.generation.aliases).
"""

from __future__ import annotations

import inspect

import torch

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.batched_loop import run_batched_rounds
from hf_dynaspec.generation.medusa import lattice_route
from hf_dynaspec.generation.public_loop import check_public_inputs, verify_kernel_for
from hf_dynaspec.generation.rounds import build_round
from hf_dynaspec.modeling.assistant import DynaSpecAssistant
from hf_dynaspec.modeling.medusa import MedusaAssistant
from hf_dynaspec.modeling.medusa_options import CALL_OPTIONS as LATTICE_OPTIONS
from hf_dynaspec.modeling.options import LEGACY_NAMES, OPTION_DEFAULTS
from hf_dynaspec.stats import start_stats

CALL_OPTIONS = tuple(dict.fromkeys([*OPTION_DEFAULTS, *LEGACY_NAMES, *LATTICE_OPTIONS]))  # every kind's, in order

ENTRY = "model.generate(..., custom_generate=speculative_generate, drafter=assistant)"


@torch.no_grad()
def speculative_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                         trees: bool = False, tree_top_k: int | None = None, tree_depth: int | None = None,
                         tree_total_tokens: int | None = None, **model_kwargs):
    """`custom_generate` callable. `drafter` (named so because generate() keeps `assistant_model` for its own
    assisted mode): a DynaSpecAssistant for `model`, drafting as `drafter.generation_config` says (`trees`: EAGLE-2
    trees instead of chains); a MedusaAssistant or a DiffusionDrafter, drafting as its `MedusaGenerationConfig`
    says, overridden for this call by keyword arguments of the options' names (`draft_plan="auto"`,
    `lattice_draft="cps"`, ...: hf_dynaspec.modeling.medusa_options). `tree_top_k`, `tree_depth`,
    `tree_total_tokens` override either's tree shape. A batch of left-padded prompts decodes each row at its own
    pace. Returns the sequences `[B, L]`, or a `GenerateDecoderOnlyOutput` with `return_dict_in_generate`."""
    if drafter is None:
        raise ValueError(f"speculative_generate needs the drafter: {ENTRY}")
    route = route_for(drafter)
    shape = {name: value for name, value in dict(tree_top_k=tree_top_k, tree_depth=tree_depth,
                                                 tree_total_tokens=tree_total_tokens).items() if value is not None}
    calls = {name: model_kwargs.pop(name) for name in CALL_OPTIONS if name in model_kwargs}
    return route(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter, trees,
                 {**shape, **calls}, model_kwargs)


def eagle_route(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter, trees: bool,
                call_options: dict, model_kwargs: dict):
    """An EAGLE assistant's rounds (and a drafter-free assistant's, `DynaSpecAssistant.for_target`)."""
    assistant = ensure_attached(drafter, model, argument="drafter")
    batch = check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs)
    options = assistant.generation_config
    options.validate_options()  # options set one by one since loading (assistant.generation_config.X = ...)
    if call_options:
        options = options.with_options(**call_options)  # a validated copy for this call (unknown names refused)
    stats = start_stats(assistant)  # one set for the call (a batch: every row's rounds)

    def rounds_for(prompt_ids, processors):  # one prompt's rounds (a batch: one per row)
        return build_round(model, assistant, options, prompt_ids, processors, stats=stats,
                           do_sample=bool(generation_config.do_sample), draws_drafts=False, with_trees=trees,
                           batch_row=batch.padded)

    with verify_kernel_for(model, options):  # before build_round: the planner's costs are measured with it
        return run_batched_rounds(model, input_ids, batch, logits_processor, stopping_criteria, generation_config,
                                  rounds_for, model_kwargs, options.verify_round)


# A drafter's route, by its class (a subclass takes its parent's): the one line a new artifact kind adds.
ROUTES = {DynaSpecAssistant: eagle_route, MedusaAssistant: lattice_route, DiffusionDrafter: lattice_route}


def route_for(drafter):
    """The route registered for `drafter`'s class or its nearest registered parent."""
    route = next((ROUTES[kind] for kind in type(drafter).__mro__ if kind in ROUTES), None)
    if route is None:
        kinds = ", ".join(kind.__name__ for kind in ROUTES)
        raise TypeError(f"speculative_generate's drafter must be one of {kinds}, got {type(drafter).__name__}")
    return route


# generate() hands a `custom_generate` only the keyword arguments its signature names: the signature names every
# drafting option of every drafter kind (current and deprecated spellings) as keyword-only, after the entry's own
# parameters. Each route refuses the names its options do not have.
*_named, _model_kwargs = inspect.signature(speculative_generate).parameters.values()
speculative_generate.__signature__ = inspect.Signature([
    *_named, *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in CALL_OPTIONS
               if name not in {p.name for p in _named}), _model_kwargs])
