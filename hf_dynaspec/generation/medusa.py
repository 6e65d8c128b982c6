"""`medusa_generate` (alias `lattice_generate`): speculative decoding from a lattice source through `generate()`'s
`custom_generate` hook: Medusa heads, or a diffusion LM (hf_dynaspec.drafting.diffusion.DiffusionDrafter).

    from hf_dynaspec import MedusaAssistant, medusa_generate
    heads = MedusaAssistant.from_pretrained(path, target=model)   # ours, FasterDecoding's or vLLM's layout
    out = model.generate(**inputs, custom_generate=medusa_generate, drafter=heads)      # as heads.generation_config says
    out = model.generate(**inputs, custom_generate=medusa_generate, drafter=heads, draft_plan="auto")  # per call

Each round the source drafts a lattice (Medusa: from the target's last hidden state of the previous pass;
hf_dynaspec.drafting.medusa picks the chain, CPS path or tree) and the public loop verifies it in one target
forward (hf_dynaspec.generation.public_loop).
Medusa's "typical acceptance" is lossy and not offered: acceptance is the tree verifier's, exact.
"""

from __future__ import annotations

import inspect

import torch

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.drafting.medusa import LatticeRound
from hf_dynaspec.drafting.planning.core import TreeShape
from hf_dynaspec.drafting.planning.lattice_planner import LatticePlanner, lattice_memory
from hf_dynaspec.errors import AssistantMismatchError
from hf_dynaspec.generation.batched_loop import run_batched_rounds
from hf_dynaspec.generation.costs.lattice_costs import lattice_round_costs
from hf_dynaspec.generation.public_loop import check_public_inputs
from hf_dynaspec.modeling.acceptance_prior import prior_for
from hf_dynaspec.modeling.medusa import MedusaAssistant
from hf_dynaspec.modeling.medusa_options import CALL_OPTIONS, MedusaGenerationConfig, MedusaOptions
from hf_dynaspec.runtime_store import runtime_of
from hf_dynaspec.stats import start_stats


@torch.no_grad()
def medusa_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                    **model_kwargs):
    """`custom_generate` callable. `drafter`: a `MedusaAssistant` for `model`, or a `DiffusionDrafter`. It drafts as
    the heads' `generation_config` (`MedusaGenerationConfig`, saved with them) says; keyword arguments of the same
    names override it for this call (`draft_plan="auto"`, `lattice_draft="cps"`, `num_assistant_tokens=3`, ...;
    hf_dynaspec.modeling.medusa_options lists them). Returns the sequences `[1, L]`, or a
    `GenerateDecoderOnlyOutput` with `return_dict_in_generate`."""
    heads = _attached(drafter, model)
    config = getattr(heads, "generation_config", None)
    config = config if isinstance(config, MedusaGenerationConfig) else MedusaGenerationConfig()
    options = config.lattice_options(**{name: model_kwargs.pop(name) for name in CALL_OPTIONS if name in model_kwargs})
    batch = check_public_inputs(model, heads, input_ids, generation_config, model_kwargs)
    planner = _planner(model, heads, options, bool(generation_config.do_sample))
    stats, vocab_size = start_stats(heads), model.get_output_embeddings().weight.shape[0]

    def rounds_for(prompt_ids, processors):  # one per prompt of a batch: its own context, ADL and n-gram scorer
        return LatticeRound(heads, options, stats, vocab_size, planner)

    return run_batched_rounds(model, input_ids, batch, logits_processor, stopping_criteria, generation_config,
                              rounds_for, model_kwargs)


# generate() hands a `custom_generate` only the keyword arguments its signature names: the signature names every
# drafting option (current and deprecated spellings) as keyword-only.
*_named, _model_kwargs = inspect.signature(medusa_generate).parameters.values()
medusa_generate.__signature__ = inspect.Signature([
    *_named, *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in CALL_OPTIONS),
    _model_kwargs])
lattice_generate = medusa_generate  # the same route, named for any lattice source


def _planner(model, source, options: MedusaOptions, do_sample: bool) -> LatticePlanner | None:
    """`draft="auto"`'s planner: this machine's measured costs, the source's tables for this decoding mode (kept
    across calls in the source's run-time state: a planner learns the workload)."""
    if options.draft != "auto":
        return None
    depth = (source.num_positions if options.num_assistant_tokens is None
             else min(options.num_assistant_tokens, source.num_positions))
    memories = runtime_of(source).planner_memories
    if do_sample not in memories:  # the tables start at the acceptance measured with the heads, if any
        stored = getattr(getattr(source, "config", None), "expected_acceptance", None)
        memories[do_sample] = lattice_memory(prior_for(stored, do_sample))
    memory = memories[do_sample]
    costs = lattice_round_costs(model, source, options, max(depth, options.tree_total_tokens))
    tree = TreeShape(options.tree_top_k, depth, options.tree_total_tokens)
    return LatticePlanner(costs, memory, depth, tree)


def _attached(heads, model):
    if heads is None:
        raise ValueError("medusa_generate needs the heads: model.generate(..., custom_generate=medusa_generate, "
                         "drafter=MedusaAssistant.from_pretrained(path, target=model))")
    if isinstance(heads, DiffusionDrafter):
        return heads.attach(model) if heads.target is not model else heads
    if not isinstance(heads, MedusaAssistant):
        raise TypeError(f"medusa_generate's drafter must be a MedusaAssistant or a DiffusionDrafter, got "
                        f"{type(heads).__name__}")
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
