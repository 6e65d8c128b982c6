"""What a speculation round costs on this machine, measured once and cached: the planner's (`draft_plan="auto"`) input.

The planner (hf_dynaspec.drafting.planning.planner) weighs draft lengths by seconds, so it needs, for the target and
assistant of a call, on this device, dtype and thread count:

- `verify_seconds[n]`: the target's forward over n new tokens on a cache of `CONTEXT` tokens (n = 1 is a plain
  decoding step; n = K + 1 verifies K drafts). Measured at a few n and interpolated. This is what differs most
  between machines: on AVX-512 BF16 CPUs 8 tokens cost ~1.2 steps, on AVX2 CPUs ~8, on GPUs ~1;
- `consume_seconds`: the drafter's pass over the newly verified positions (paid every round, drafting or not);
- `draft_step_seconds`: one more drafted token (a drafter step and the head through the call's shortlist);
- `first_draft_seconds`: the head on the pass that consumed the verified positions (the first drafted token);
- `tree_step_seconds`: one more depth of an EAGLE-2 tree of the assistant's shape (a drafter step over `tree_top_k`
  frontier rows, the head over them, the top-k choices), which prices trees for `speculative_generate(trees=True)`'s planner.

Measuring takes a few seconds (hf_dynaspec.generation.costs.timing); the result is kept in the cost cache
(hf_dynaspec.generation.costs.store), keyed by everything that changes it (shapes, dtype, device, threads,
shortlist options, versions), so a machine measures each pairing once; an entry whose numbers are not finite,
positive seconds of the right shape is measured again.

Legend: N calibration context, n tokens per forward.
"""

from __future__ import annotations

import functools

import torch
from transformers.cache_utils import DynamicCache

from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.planning.core import RoundCosts
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.costs.store import cached_costs, round_key
from hf_dynaspec.generation.costs.timing import CONTEXT, min_seconds, random_ids
from hf_dynaspec.generation.costs.verify_costs import verify_table
from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.kernels.streams import devices_of


def calibration_key(target, assistant, options) -> str:
    """Everything the costs depend on: the target's and drafter's shapes and dtype, the device, the threads, the
    shortlist options, whether the target's Linear layers are rerouted (cpu_verify), and the versions."""
    return round_key(target, drafter_config=assistant.config.to_json_string(use_diff=False),
                     shortlist=[options.shortlist, options.shortlist_size, options.max_clusters,
                                options.fixed_clusters, options.max_shortlist_size, options.shortlist_rows],
                     tree=[options.tree_top_k, options.tree_total_tokens])


def round_costs(target, assistant, options, head, max_tokens: int) -> RoundCosts:
    """The costs for this pairing: from memory, else from the calibration file, else measured (and saved)."""
    return cached_costs(
        RoundCosts, f"{calibration_key(target, assistant, options)}:{max_tokens}", max_tokens,
        measure=lambda: measure_round_costs(target, assistant, head, max_tokens, tree_top_k=options.tree_top_k,
                                            tree_total_tokens=options.tree_total_tokens),
        what="speculation costs for draft_plan='auto'")


@torch.no_grad()
def measure_round_costs(target, assistant, head, max_tokens: int, tree_top_k: int = 4,
                        tree_total_tokens: int = 8) -> RoundCosts:
    """Measure `RoundCosts` with `verify_seconds` up to `max_tokens + 1` tokens (K drafts and the target's own),
    trees of `tree_top_k` children per node and `tree_total_tokens` nodes (a drafter-free assistant: the verify
    table, every drafter part 0)."""
    device = target.get_input_embeddings().weight.device
    ids = random_ids(target, assistant.config.vocab_size, device, largest=max_tokens + 1)
    cache = DynamicCache()
    selection = assistant.drafter.hidden_state_selection()
    # The calibration context, once: only where verify sizes are missing or a drafter is timed.
    prefill = functools.cache(lambda: target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True,
                                             output_hidden_states=selection))

    verify_seconds = verify_table(target, ids, cache, max_tokens + 1, device, prefill)
    if not assistant.has_drafter:  # a drafter-free assistant: a round is its verify forward
        return RoundCosts(verify_seconds, 0.0, 0.0, 0.0, 0.0)
    target_hidden = assistant.drafter.select_target_hidden(prefill().hidden_states)
    consume, first, step, tree_step = measure_drafter(assistant, head, ids, target_hidden,
                                                      (tree_top_k, tree_total_tokens))
    return RoundCosts(verify_seconds, consume, first, step, tree_step)


def measure_drafter(assistant, head, ids, target_hidden, tree_shape: tuple[int, int]):
    """(consume, first draft, one more draft step, one more tree depth) seconds, on the calibration context;
    `tree_shape`: (top_k, total_tokens) of the trees."""
    session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=False, head=head)
    top_k, total_tokens = tree_shape
    trees = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=top_k, depth=3,
                             total_tokens=total_tokens, head=head, chain=session)
    context = ids[:, : CONTEXT - 2]
    session.consume_verified(context, target_hidden, choose=False)  # the prompt pass, untimed
    start = session.num_verified_pairs
    verified = ids[:, : CONTEXT]  # two newly verified positions, as after a round that accepted one draft
    new_hidden = target_hidden[:, start:]

    def rewind():
        session.num_verified_pairs = start
        session.cache.crop(start)

    def consume():
        rewind()
        session.consume_verified(verified, new_hidden, choose=False)

    def draft(tokens):
        rewind()
        session.draft(verified, new_hidden, tokens)

    def tree(depth):
        rewind()
        trees.draft_tree(verified, new_hidden, max_depth=depth)

    devices = devices_of(assistant)
    consume()
    consume_seconds = min_seconds(consume, devices)
    draft(1)
    one = min_seconds(lambda: draft(1), devices)
    three = min_seconds(lambda: draft(3), devices)
    tree(3)
    tree_one = min_seconds(lambda: tree(1), devices)
    tree_three = min_seconds(lambda: tree(3), devices)
    rewind()
    return (consume_seconds, max(one - consume_seconds, 0.0), max((three - one) / 2, 0.0),
            max((tree_three - tree_one) / 2, 0.0))


