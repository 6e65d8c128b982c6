"""Exact output distributions of one speculative round, by enumerating every random choice the code makes.

The code under test draws its randomness from `hf_dynaspec.sampling.sample` (the package's one categorical draw:
drafting, the residual, the first and bonus tokens), `torch.multinomial` (transformers' own residual and bonus
draws), `torch.rand_like` (transformers' accept test, `r <= p(x) / q(x)`) and
`hf_dynaspec.generation.tree_verify.first_accepted` (the tree's sibling trials). `enumerate_paths` replaces those four by a
chooser that, instead of drawing, follows
one branch and records the others, and re-runs the function depth-first until every branch has been
followed once. Each path's weight is the product of the probabilities the code itself asked for, so the
result is the exact distribution of the function's output, with no sampling noise: a bias of 1e-4 shows.

`chain_round` and `tree_round` run one round of drafting and verification through the library's real code
(the candidate generator, transformers' `_speculative_sampling`; the tree drafter and `accept_path`);
`extended_joint` continues every outcome with the target's own distribution, so that an exact round gives
exactly the target's joint distribution of the next L tokens (`target_joint`).

Legend: V vocabulary, K draft length, L tokens compared.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from contextlib import contextmanager
from functools import lru_cache

import torch
import transformers.generation.utils as generation_utils
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache

import hf_dynaspec.generation.tree_verify as tree_verify
import hf_dynaspec.sampling as sampling
from hf_dynaspec.drafting.contract import DraftTree, host_tree
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.candidate_generator import make_candidate_generator
from hf_dynaspec.generation.tree_verify import cache_kwargs


class _Chooser:
    """Follows `script` (the branch index at each choice point), then the first live branch."""

    def __init__(self, script: list[int]):
        self.script = script
        self.taken: list[int] = []
        self.live: list[list[int]] = []
        self.weight = 1.0

    def choose(self, weights: list[float]) -> int:
        live = [i for i, w in enumerate(weights) if w > 0.0]
        if not live:
            raise AssertionError(f"a random choice with no positive weight: {weights}")
        depth = len(self.taken)
        index = self.script[depth] if depth < len(self.script) else live[0]
        self.taken.append(index)
        self.live.append(live)
        self.weight *= weights[index]
        return index

    # -- the three random sources ----------------------------------------------------------------------
    def multinomial(self, probs: torch.Tensor, num_samples: int = 1, replacement: bool = False, *, generator=None,
                    out=None) -> torch.Tensor:
        if num_samples != 1:
            raise AssertionError("the enumeration follows single draws only")
        rows = probs.double().reshape(-1, probs.shape[-1])
        rows = rows / rows.sum(-1, keepdim=True)  # multinomial normalises its input
        picks = [self.choose(row.tolist()) for row in rows]
        result = torch.tensor(picks, dtype=torch.long, device=probs.device)
        return result.reshape(*probs.shape[:-1], 1)

    def sample(self, probs: torch.Tensor, generator=None) -> torch.Tensor:
        """hf_dynaspec.sampling.sample's contract: one draw per row of `probs` `[..., V]` -> `[..., 1]`."""
        return self.multinomial(probs, 1)

    def rand_like(self, ratio: torch.Tensor, **kwargs) -> torch.Tensor:
        """transformers accepts where `r <= ratio`: r = 0 accepts (weight min(1, ratio)), r = 1 rejects."""
        values = []
        for value in ratio.double().flatten().tolist():
            accept = min(1.0, max(0.0, value))
            values.append(0.0 if self.choose([accept, 1.0 - accept]) == 0 else 1.0)
        return torch.tensor(values, dtype=ratio.dtype, device=ratio.device).reshape(ratio.shape)

    def first_accepted(self, ratios: torch.Tensor, generator=None) -> torch.Tensor:
        """Trials in order, each succeeding with its ratio: the first success i has weight prod_{j<i}(1 - r_j) r_i,
        none (index len(ratios)) the product of every failure."""
        weights, failed = [], 1.0
        for value in ratios.double().tolist():
            r = min(1.0, max(0.0, value))
            weights.append(failed * r)
            failed *= 1.0 - r
        index = self.choose(weights + [failed])
        return torch.tensor([index], dtype=torch.long, device=ratios.device)


@contextmanager
def _randomness_replaced_by(chooser: _Chooser):
    saved = torch.multinomial, torch.rand_like, tree_verify.first_accepted, sampling.sample
    torch.multinomial, torch.rand_like, tree_verify.first_accepted, sampling.sample = (
        chooser.multinomial, chooser.rand_like, chooser.first_accepted, chooser.sample)
    try:
        yield
    finally:
        torch.multinomial, torch.rand_like, tree_verify.first_accepted, sampling.sample = saved


def enumerate_paths(fn, max_paths: int | None = None) -> list[tuple[float, object]]:
    """Every (probability, output) of `fn()` over all of its random choices; the probabilities sum to 1. More
    than `max_paths` paths fail at once: code that draws where it should not (a draft sampled where it must be
    deterministic) multiplies the paths, and the enumeration would otherwise run for hours."""
    results, stack = [], [[]]
    while stack:
        if max_paths is not None and len(results) >= max_paths:
            raise AssertionError(f"more than {max_paths} random paths: the code draws more often than it should")
        script = stack.pop()
        chooser = _Chooser(script)
        with _randomness_replaced_by(chooser):
            output = fn()
        results.append((chooser.weight, output))
        for depth in range(len(script), len(chooser.taken)):
            stack.extend(chooser.taken[:depth] + [alt] for alt in chooser.live[depth] if alt != chooser.taken[depth])
    total = sum(w for w, _ in results)
    if abs(total - 1.0) > 1e-9:
        raise AssertionError(f"path probabilities sum to {total}")
    return results


class TargetOracle:
    """The target's processed next-token distribution on any context, memoised: `probs(ids) -> [V]` float64."""

    def __init__(self, target, logits_processor=None):
        self.target = target
        self.logits_processor = logits_processor
        self._probs = lru_cache(maxsize=None)(self._compute)

    @torch.no_grad()
    def _compute(self, ids: tuple[int, ...]) -> torch.Tensor:
        context = torch.tensor([ids])
        logits = self.target(context).logits[:, -1].float()
        if self.logits_processor is not None and len(self.logits_processor):
            logits = self.logits_processor(context, logits)
        return logits.softmax(-1)[0].double()

    def probs(self, ids) -> torch.Tensor:
        return self._probs(tuple(int(i) for i in ids))

    @torch.no_grad()
    def logits_rows(self, ids: torch.Tensor, num_rows: int) -> torch.Tensor:
        """Raw float32 logits `[1, num_rows, V]` of the last `num_rows` positions of `ids` `[1, N]` (one pass)."""
        return self.target(ids).logits[:, -num_rows:].float()


def target_joint(oracle: TargetOracle, context: list[int], length: int) -> dict[tuple, float]:
    """The target's own probability of every continuation of `length` tokens."""
    vocab = oracle.probs(context).shape[0]
    joint = {}
    for seq in itertools.product(range(vocab), repeat=length):
        prob = 1.0
        for j, token in enumerate(seq):
            prob *= float(oracle.probs(context + list(seq[:j]))[token])
            if prob == 0.0:
                break
        joint[seq] = prob
    return joint


def extended_joint(oracle: TargetOracle, context: list[int], outcomes: dict[tuple, float], length: int):
    """The joint distribution of the next `length` tokens when each round outcome (committed tokens, possibly
    fewer than `length`) is continued by sampling from the target."""
    vocab = oracle.probs(context).shape[0]
    joint = {}
    for seq in itertools.product(range(vocab), repeat=length):
        total = 0.0
        for m in range(1, length + 1):
            prob = outcomes.get(seq[:m], 0.0)
            for j in range(m, length):
                if prob == 0.0:
                    break
                prob *= float(oracle.probs(context + list(seq[:j]))[seq[j]])
            total += prob
        joint[seq] = total
    return joint


def outcome_distribution(weighted: list[tuple[float, tuple]]) -> dict[tuple, float]:
    outcomes: dict[tuple, float] = {}
    for weight, tokens in weighted:
        outcomes[tokens] = outcomes.get(tokens, 0.0) + weight
    return outcomes


def max_error(joint: dict[tuple, float], reference: dict[tuple, float]) -> float:
    """The largest difference over every outcome either gives a probability (an outcome one lacks has 0)."""
    return max(abs(joint.get(k, 0.0) - reference.get(k, 0.0)) for k in joint.keys() | reference.keys())


# -- one chain round (model.generate(assistant_model=...)'s code path) --------------------------------------
def chain_round(target, assistant, prompt: list[int], logits_processor, num_draft_tokens: int):
    """Exact outcome distribution `{committed tokens: probability}` of one chain round after `prompt`, whose
    last token is the one the prefill produced. Drafting: the library's candidate generator; verification:
    transformers' `_speculative_sampling` (or its per-position sampling when a round has no draft logits)."""
    oracle = TargetOracle(target)
    input_ids = torch.tensor([prompt])
    config = GenerationConfig(do_sample=True, max_length=len(prompt) + num_draft_tokens + 1)
    probe = make_candidate_generator(assistant, target, input_ids, config, logits_processor, {})
    with torch.no_grad():
        prefill = target(input_ids[:, :-1], **probe.model_kwargs_overrides)

    def draft():
        generator = make_candidate_generator(assistant, target, input_ids, config, logits_processor, {})
        candidate_ids, candidate_logits = generator.get_candidates(input_ids, model_outputs=prefill)
        return candidate_ids, candidate_logits

    outcomes = []
    for draft_weight, (candidate_ids, candidate_logits) in enumerate_paths(draft):
        num_drafted = candidate_ids.shape[1] - input_ids.shape[1]
        new_logits = oracle.logits_rows(candidate_ids, num_drafted + 1)
        if logits_processor is not None and len(logits_processor):
            for i in range(num_drafted + 1):  # as transformers' assisted decoding does
                context = candidate_ids[:, : input_ids.shape[1] + i]
                new_logits[:, i, :] = logits_processor(context, new_logits[:, i, :].clone())

        verify = functools.partial(_verify, candidate_ids, candidate_logits, num_drafted, new_logits)
        for weight, tokens in enumerate_paths(verify):
            outcomes.append((draft_weight * weight, tokens))
    return outcome_distribution(outcomes)


def _verify(candidate_ids, candidate_logits, num_drafted, new_logits) -> tuple[int, ...]:
    if candidate_logits is not None:  # transformers' condition (under sampling): even for an empty draft
        # Releases before 5.24 take a fifth argument, whether the candidate sequence already meets a stopping
        # criterion (never here: no EOS in these rounds).
        extra = [False] * ("is_done_candidate" in inspect.signature(generation_utils._speculative_sampling).parameters)
        valid, _ = generation_utils._speculative_sampling(candidate_ids, candidate_logits, num_drafted, new_logits,
                                                          *extra)
        return tuple(valid[0].tolist())
    # transformers' other branch: sample every position from p, keep drafts up to the first mismatch.
    selected = torch.multinomial(new_logits.softmax(-1)[0], num_samples=1).squeeze(1)
    drafts = candidate_ids[0, candidate_ids.shape[1] - num_drafted :]
    matches = int(((~(drafts == selected[:-1])).cumsum(-1) < 1).sum())
    return tuple(selected[: matches + 1].tolist())


# -- one tree round (tree_generate's code path) ------------------------------------------------------------
@torch.no_grad()
def tree_round(target, assistant, prompt: list[int], logits_processor, top_k: int, depth: int, total: int):
    """Exact outcome distribution of one tree round after `prompt` (its last token from the prefill), with the
    tree drafter, the tree-masked target pass on the prefill's cache and `accept_path`, as speculative_generate(trees=True) runs
    them. Returns (outcomes, the tree's node count)."""
    input_ids = torch.tensor([prompt])
    cache = DynamicCache(config=target.config)
    selection = assistant.drafter.hidden_state_selection()
    prefill = target(input_ids[:, :-1], **cache_kwargs(target, cache), use_cache=True, output_hidden_states=selection)
    session = TreeDraftSession(assistant.drafter, assistant.config.vocab_size, top_k=top_k, depth=depth,
                               total_tokens=total, head=runtime_head(assistant, assistant.generation_config))
    tree = session.draft_tree(input_ids, assistant.drafter.select_target_hidden(prefill.hidden_states))
    past_length = input_ids.shape[1] - 1
    out = target(input_ids=tree.token_ids[None], position_ids=tree_position_ids(tree, past_length),
                 attention_mask=tree_attention_mask(tree, past_length, target.dtype), **cache_kwargs(target, cache),
                 use_cache=True)
    logits = out.logits[0].float()

    def verify():
        path = tree_verify.accept_path(tree, logits, input_ids, logits_processor, do_sample=True)
        return tuple(tree.token_ids[path.nodes].tolist()) + (path.next_token,)

    return outcome_distribution(enumerate_paths(verify)), len(tree)


# The reference forward of one tree (the loop builds its masks itself, batched_loop._verify): positions and mask.
def tree_position_ids(tree: DraftTree, past_length: int) -> torch.Tensor:
    """Position ids `[1, N]`: the root continues the cached prefix, every node sits one after its parent."""
    return (tree.depths + past_length)[None]


def tree_attention_mask(tree: DraftTree, past_length: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask `[1, 1, N, P + N]` (0 where a node may attend, the dtype's minimum elsewhere).

    Additive rather than boolean so that every attention implementation (eager adds the mask, SDPA accepts
    either) reads it the same way; transformers passes a 4-D mask through untouched.
    """
    n = len(tree)
    visible = torch.ones(n, past_length + n, dtype=torch.bool, device=tree.parents.device)
    visible[:, past_length:] = tree.ancestor_matrix()
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def path_to(tree: DraftTree, node: int) -> list[int]:
    """Node indices of `tree` from the root to `node`, both included (a brute-force reference for the masks)."""
    parents = tree.parents.tolist()
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


def tree_from_parents(token_ids: torch.Tensor, parents: list[int]) -> DraftTree:
    """The tree of `token_ids` `[N]` (node 0 the root) whose node i's parent is `parents[i]` (`parents[0] == -1`)."""
    assert parents[0] == -1 and len(parents) == len(token_ids)
    return host_tree(token_ids[:1], token_ids[1:].tolist(), parents[1:])
