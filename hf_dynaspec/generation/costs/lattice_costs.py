"""What a lattice round costs on this machine (Medusa `draft_plan="auto"`'s input), measured once and cached beside the
EAGLE planner's costs (hf_dynaspec.generation.costs.store: same file, same checks, same keys plus the source's).

- `verify_seconds[n]`: the target's forward over n new tokens on a cache of `CONTEXT` tokens, as for EAGLE;
- `lattice_seconds`: the source's scores for every position (`lattice_logits` at full depth, read to the host as
  a round reads it): K head blocks and projections, or a diffusion forward;
- `tree_seconds`: the host search of a lattice tree of the configured size (with the n-gram scorer when the
  options score with it).

Legend: N calibration context.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from hf_dynaspec.drafting.lattice import Lattice, NgramScorer, lattice_tree
from hf_dynaspec.drafting.planning.core import LatticeCosts
from hf_dynaspec.generation.costs.store import cached_costs, round_key
from hf_dynaspec.generation.costs.timing import CONTEXT, min_seconds, random_ids
from hf_dynaspec.generation.costs.verify_costs import verify_table
from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.kernels.streams import devices_of


def lattice_costs_key(target, source, options, max_tokens: int) -> str:
    """Everything the costs depend on: the target's parts (shapes, dtype, device, threads, versions), the source's
    config, the options that change the lattice's or the tree's work, which rows the rows kernel takes."""
    digest = round_key(target, lattice_source=type(source).__name__,
                       source_config=source.config.to_json_string(use_diff=False),
                       options=[options.shortlisted, options.max_candidates, options.coverage, options.tree_top_k,
                                options.tree_total_tokens, options.cps_lambda < 1.0, options.ngram_order])
    return f"lattice:{digest}:{max_tokens}"


def lattice_round_costs(target, source, options, max_tokens: int) -> LatticeCosts:
    """The costs for this pairing: from memory, else from the calibration file, else measured (and saved)."""
    return cached_costs(LatticeCosts, lattice_costs_key(target, source, options, max_tokens), max_tokens,
                        measure=lambda: measure_lattice_costs(target, source, options, max_tokens),
                        what="lattice round costs for Medusa draft_plan='auto'")


@torch.no_grad()
def measure_lattice_costs(target, source, options, max_tokens: int) -> LatticeCosts:
    """Measure `LatticeCosts` with `verify_seconds` up to `max_tokens + 1` tokens."""
    device = target.get_input_embeddings().weight.device
    ids = random_ids(target, target.config.vocab_size, device, largest=max_tokens + 1)
    cache = DynamicCache()
    out = target(input_ids=ids[:, : CONTEXT], **cache_kwargs(target, cache), use_cache=True,
                 output_hidden_states=source.hidden_state_selection())
    verify_seconds = verify_table(target, ids, cache, max_tokens + 1, device)
    context = ids[:, : CONTEXT]
    hidden = source.select_target_hidden(out.hidden_states)
    depth = max(1, min(max_tokens, source.num_positions))

    def lattice():
        logits, columns = source.lattice_logits(context, hidden, depth, options.shortlisted)
        return Lattice.from_logits(logits, columns, options.max_candidates, options.coverage)

    read = lattice()
    scorer = None
    if options.cps_lambda < 1.0:
        scorer = NgramScorer(target.config.vocab_size, order=options.ngram_order)
        scorer.extend(context[0].tolist())

    def tree():
        lattice_tree(read, options.tree_total_tokens, depth, top_k=options.tree_top_k, scorer=scorer,
                     lam=options.cps_lambda)

    tree()
    devices = devices_of(target, source)
    return LatticeCosts(verify_seconds, min_seconds(lattice, devices), min_seconds(tree, devices))
