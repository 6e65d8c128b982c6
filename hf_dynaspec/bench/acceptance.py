"""Measure a drafter's acceptance with its target, for the artifact to carry (`expected_acceptance` in its
generation config: hf_dynaspec.modeling.acceptance_prior) and for the planner's simulation traces.

Every round of the measurement is a probe (`PlannerMemory.measuring`): the whole chain of
`auto_max_assistant_tokens` tokens, uncut, and on `speculative_generate(trees=True)` every other round the whole tree of the
assistant's shape, so each position and depth is measured whatever this machine's costs (a planner would cut
drafts where verification is dear, and the measurement would then depend on the host). Prompt lookup and the
suffix cache are off: they are the workload's, not the drafter's. The planner's own tables do the counting, so
the prior is measured exactly as the planner will read it. Output is unchanged (the plan never reads a drawn
token), so the calls also produce the target's greedy continuations.

Sampled (`do_sample=True`, with the target's published sampling settings as `generate_kwargs`): the rounds run on
the route a sampling user runs, `assistant_model=` (drafts drawn from the drafter, verified by speculative
sampling), chains only: the acceptance of a drawn draft (sum of min(p, q)) is not that of the public route's
point-mass proposals (p of the proposed token), and the planner's sampled tables serve the user route.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from hf_dynaspec.drafting.planning.core import PlannerMemory
from hf_dynaspec.drafting.runtime import runtime_of
from hf_dynaspec.generation.speculative import speculative_generate
from hf_dynaspec.modeling.acceptance_prior import CONFIDENCE_BINS, DEFAULT_WEIGHT, AcceptancePrior


@contextmanager
def _measuring(assistant, do_sample: bool):
    """Every round a probe, lookups off, a fresh memory with a round log; the assistant as it was afterwards."""
    runtime = runtime_of(assistant)
    saved_config, saved_memory = assistant.generation_config, runtime.planner_memories.get(bool(do_sample))
    memory = PlannerMemory()
    memory.measuring = True  # every round probes, whole, whatever the costs
    memory.log = []
    runtime.planner_memories[bool(do_sample)] = memory
    assistant.generation_config = saved_config.with_options(draft_plan="auto", prompt_lookup_num_tokens=0,
                                                            suffix_cache_num_tokens=0)
    try:
        yield memory
    finally:
        assistant.generation_config = saved_config
        if saved_memory is None:
            runtime.planner_memories.pop(bool(do_sample), None)
        else:
            runtime.planner_memories[bool(do_sample)] = saved_memory


def measure_acceptance(target, assistant, prompts: list[torch.Tensor], max_new_tokens: int = 64,
                       do_sample: bool = False, weight: float = DEFAULT_WEIGHT, **generate_kwargs):
    """Run `prompts` (each `[1, N]` ids on the target's device) through `speculative_generate(trees=True)` with every round probed.

    Returns `(prior, calls)`: the `AcceptancePrior` (`prior_from_memory`: smoothed rates, with the number of rounds
    behind them) and, per prompt, `{"prompt_length", "output_ids", "rounds"}` where each round is
    `{"source": "drafter" | "tree", "drafted", "accepted", "confidences"}` in order (the simulation traces)."""
    calls = []
    route = dict(assistant_model=assistant) if do_sample else dict(custom_generate=speculative_generate, trees=True, drafter=assistant)
    with _measuring(assistant, do_sample) as memory:
        for ids in prompts:
            memory.log.clear()
            out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=do_sample, **route, **generate_kwargs)
            calls.append({"prompt_length": int(ids.shape[1]), "output_ids": out[0].tolist(),
                          "rounds": copy.deepcopy(memory.log)})
        prior = prior_from_memory(memory, assistant.generation_config, weight)
    return prior, calls


SHRINK = 4.0  # pseudo-rounds pulling a sparsely reached position toward the one before it


def prior_from_memory(memory: PlannerMemory, options, weight: float = DEFAULT_WEIGHT) -> AcceptancePrior:
    """The measured tables of `memory` -> an `AcceptancePrior` for positions 1..`auto_max_assistant_tokens`, the
    ten confidence bins and the depths of the options' tree.

    Later positions are reached less often (a draft reaches position j only when the j - 1 before it were
    accepted), so each rate is shrunk toward the position before it with `SHRINK` pseudo-rounds: a position seen
    5 times does not swing the plan on its own, one seen 500 times keeps its own rate. Position 1 and depth 1 are
    Laplace-smoothed, confidence bins shrunk toward their middle."""
    def chained(counts_at) -> list[float]:
        rates, previous = [], None
        for counts in counts_at:
            accepted, reached = counts if counts is not None else (0, 0)
            start = previous if previous is not None else 0.5
            pseudo = SHRINK if previous is not None else 2.0
            previous = (accepted + pseudo * start) / (reached + pseudo)
            rates.append(previous)
        return rates

    positions = memory.position.counts
    if not positions.get(1, [0, 0])[1]:
        raise ValueError("no drafter round was measured: give prompts with room for drafts (max_new_tokens >= 2)")
    position = chained(positions.get(j) for j in range(1, options.auto_max_assistant_tokens + 1))
    bins = memory.confidence.counts
    middle = [(b + 0.5) / CONFIDENCE_BINS for b in range(CONFIDENCE_BINS)]
    confidence = [(bins[b][0] + SHRINK * middle[b]) / (bins[b][1] + SHRINK) if b in bins else middle[b]
                  for b in range(CONFIDENCE_BINS)]
    shape = (options.tree_top_k, options.tree_total_tokens)
    depths = [memory.tree_depth.counts.get((*shape, d)) for d in range(1, options.tree_depth + 1)]
    measured_depths = len(depths) if all(depths) else depths.index(None)
    tree_depth = chained(depths[:measured_depths])
    rounds = positions[1][1] + ((memory.tree_depth.counts.get((*shape, 1)) or [0, 0])[1])
    return AcceptancePrior(position=tuple(position), confidence=tuple(confidence), tree_depth=tuple(tree_depth),
                           tree_shape=shape if tree_depth else None, rounds=rounds, weight=weight)
