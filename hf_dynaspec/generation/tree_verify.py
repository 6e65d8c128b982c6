"""Choosing the accepted path of a verified tree, keeping only that path in the target's KV cache, and the
name under which a target's forward takes that cache (`cache_kwargs`).

Greedy: walk from the root, following the child whose token is the target's (processed) argmax; the first
argmax with no matching child is the target's own next token. Every committed token is the argmax of the
target's logits on its exact prefix, so the output equals plain greedy decoding. The walk runs on the device
(with logits processors too: each node's row is processed on its own path's context) and is read back once.

Sampling (lossless multi-draft acceptance): the tree's children are deterministic proposals, i.e. each is a
draft distribution concentrated on one token. At a node with target distribution p, try the children in
order: accept child x with probability p(x); on rejection set p(x) = 0 and renormalise (the residual of a
point-mass draft) and try the next child; when none is accepted, sample the next token from what remains.
Each step's output is then distributed exactly as p: the recursive rejection sampling of SpecInfer with
one-hot draft distributions. The trials of one node's children are independent given their ratios (child i is
tried with p(x_i) / (1 - the earlier children's p)), so they are drawn at once and the first success wins: one
device step per depth, no host read until the path is known (`sampled_path`).

Legend: N tree nodes, V vocabulary, P cached prefix length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

import hf_dynaspec.sampling as sampling
from hf_dynaspec.drafting.contract import DraftTree
from hf_dynaspec.modeling.drafter import cache_argument


@dataclass
class AcceptedPath:
    nodes: list[int]  # accepted draft nodes, root excluded, root-to-leaf order
    next_token: int  # the target's own token after the last accepted node
    scores: list  # per committed token: the processed logits row `[1, V]` it was chosen from
    logits: list  # per committed token: the raw logits row `[1, V]`
    # On the tree's device: the kept nodes `[1 + n]` (root first) and the committed tokens `[n + 1]`, so that the
    # caller compacts the cache and appends the tokens without uploading host lists.
    kept_index: torch.Tensor
    new_tokens: torch.Tensor


def accept_path(tree: DraftTree, logits: torch.Tensor, input_ids: torch.Tensor, logits_processor=None,
                do_sample: bool = False, generator: torch.Generator | None = None) -> AcceptedPath:
    """Walk the verified tree. `logits` `[N, V]` float32: the target's logits at each node; `input_ids` `[1, L]`
    ends with the root token. `logits_processor` (transformers' list, incl. sampling warpers) is applied to each
    row on its exact context, as plain `generate()` would."""
    processing = logits_processor is not None and len(logits_processor) > 0
    if not do_sample and not processing:
        return greedy_path(tree, logits)
    if not do_sample:
        return processed_greedy_path(tree, logits, input_ids, logits_processor)
    return sampled_path(tree, logits, input_ids, logits_processor if processing else None, generator)


def sampled_path(tree: DraftTree, logits: torch.Tensor, input_ids: torch.Tensor, logits_processor,
                 generator: torch.Generator | None) -> AcceptedPath:
    """The sampled walk on the device: one step per depth (`sibling_trial`), whatever the outcome, and one host
    read at the end. A step past the node where the walk stopped tries no child (every ratio 0) and changes nothing;
    the token after the path is drawn once, from the residual saved where the walk stopped."""
    n, device = len(tree), logits.device
    levels = (tree.max_depth if tree.max_depth is not None else n - 1) + 1
    node = torch.zeros(1, dtype=torch.long, device=device)
    alive = torch.ones(1, dtype=torch.bool, device=device)
    path = node  # the walk's nodes so far, root first
    stop_probs, rows = None, []
    for depth in range(levels):
        row = logits.index_select(0, node)  # [1, V]
        if logits_processor is not None:  # processors read the context: the prefix and the accepted path so far
            context = torch.cat([input_ids, tree.token_ids[path[1:]][None]], dim=1)
            row = logits_processor(context, row.clone())  # some processors write in place
        rows.append(row)
        probs = row[0].float().softmax(dim=-1)
        ratios, residual = sibling_trial(tree, node, probs)
        first = first_accepted(torch.where(alive, ratios, 0.0), generator)  # [1]: a child's index, n when none
        stopped_here = alive & (first == n)
        stop_probs = residual if stop_probs is None else torch.where(stopped_here, residual, stop_probs)
        alive = alive & (first < n)
        node = torch.where(alive, first.clamp(max=n - 1), node)
        if depth + 1 < levels:
            path = torch.cat([path, node])  # a node past the stop repeats the last one and is cut below
    next_token = sampling.sample(stop_probs, generator)  # [1]
    length = (path[1:] != path[:-1]).sum(dim=0, keepdim=True) + 1  # nodes kept, the root included
    host = torch.cat([length, next_token, path]).tolist()  # the one host read
    kept = host[0]
    kept_index = path[:kept]
    raw_rows = [r[None] for r in logits[kept_index].unbind(0)]
    return AcceptedPath(host[3 : 2 + kept], host[1], rows[:kept], raw_rows, kept_index=kept_index,
                        new_tokens=torch.cat([tree.token_ids[kept_index[1:]], next_token]))


def sibling_trial(tree: DraftTree, node: torch.Tensor, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection over the children of `node` (`[1]`), target distribution `probs` `[V]`, as device
    tensors: `ratios` `[N]`, child i's chance of acceptance once the children before it (in node order: the
    drafter's ranking) were rejected, p(x_i) / (1 - sum of the earlier children's p) (0 for nodes that are not
    children, and for a child repeating an earlier sibling's token, whose residual mass is gone); and the residual
    `[V]` left when every child is rejected: p with the children's tokens removed, renormalised."""
    n = len(tree)
    order = torch.arange(n, device=probs.device)
    children = tree.parents == node  # [N]
    same = (tree.token_ids[:, None] == tree.token_ids[None, :]) & (order[None, :] < order[:, None])
    repeated = (same & children[None, :]).any(dim=1)
    trial = children & ~repeated
    mass = torch.where(trial, probs[tree.token_ids], 0.0)  # [N]
    before = mass.cumsum(dim=0) - mass
    remaining = probs.sum() - before
    ratios = torch.where(trial & (remaining > 0), mass / remaining.clamp(min=torch.finfo(probs.dtype).tiny), 0.0)
    # amax, not a plain scatter: a token may sit on several nodes, and only a trial child's copy removes it
    removed = torch.zeros_like(probs).scatter_reduce(0, tree.token_ids, trial.to(probs.dtype), reduce="amax")
    residual = torch.where(removed > 0, 0.0, probs)
    residual = residual / residual.sum()
    return ratios.clamp(max=1.0), residual


def first_accepted(ratios: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Bernoulli(`ratios[i]`) trials for every i at once -> `[1]`: the first i whose trial succeeds, `len(ratios)`
    when none does. Its own function so that tests/enumeration.py can follow every outcome with its exact weight
    (`prod_{j<i} (1 - r_j) r_i`) instead of drawing."""
    n = ratios.shape[0]
    success = torch.rand(n, generator=generator, device=ratios.device) < ratios
    return torch.where(success.any(dim=0, keepdim=True), success.int().argmax(dim=0, keepdim=True), n)


def greedy_path(tree: DraftTree, logits: torch.Tensor) -> AcceptedPath:
    """The greedy walk computed on the device and read back once (`GreedyWalk`)."""
    walk = GreedyWalk.on_device(tree, logits)
    return walk.finish(walk.host.tolist())  # the one host read


@dataclass
class GreedyWalk:
    """The device half of the greedy walk: `host` `[2 + levels]` (the path's last depth, the target's token after
    it, the path's nodes then padding) is what the host must read; `finish(host.tolist())` builds the path. Split
    so that a batch reads every row's `host` at once (hf_dynaspec.generation.batched_loop).

    A node is on the accepted path when every node from the root down to it carries the target's argmax at its
    parent; siblings carry distinct tokens (one top-k each), so these nodes form one chain and its deepest node
    ends the path."""

    tree: DraftTree
    logits: torch.Tensor  # [N, V]
    targets: torch.Tensor  # [N]: the argmax at each node
    last: torch.Tensor  # [1]: the deepest node on the path
    index: torch.Tensor  # [levels]: the path's nodes in depth order, then padding
    host: torch.Tensor

    @classmethod
    def on_device(cls, tree: DraftTree, logits: torch.Tensor) -> GreedyWalk:
        device = logits.device
        targets = logits.argmax(dim=-1)  # [N]
        matches = tree.token_ids == targets[tree.parents.clamp(min=0)]
        matches[0] = True  # the root is committed already
        visible = tree.ancestor_matrix()
        on_path = ~(visible & ~matches[None, :]).any(dim=-1)
        # `[1]`, not a 0-d tensor: indexing with a 0-d tensor reads it on the host (a sync per index).
        last = torch.where(on_path, tree.depths, -1).argmax(dim=0, keepdim=True)
        n = len(tree)
        levels = (tree.max_depth if tree.max_depth is not None else n - 1) + 1
        # The path's nodes in index order (= depth order: parents precede children), then padding.
        index = torch.sort(torch.where(visible[last][0], torch.arange(n, device=device), n)).values[:levels]
        return cls(tree, logits, targets, last, index, torch.cat([tree.depths[last], targets[last], index]))

    def finish(self, host: list[int]) -> AcceptedPath:
        length, next_token, nodes = host[0] + 1, host[1], host[2 : 2 + host[0] + 1]
        kept_index = self.index[:length]
        rows = [row[None] for row in self.logits[kept_index].unbind(0)]
        new_tokens = torch.cat([self.tree.token_ids[kept_index[1:]], self.targets[self.last]])
        return AcceptedPath(nodes[1:], next_token, rows, rows, kept_index=kept_index, new_tokens=new_tokens)


def processed_greedy_path(tree: DraftTree, logits: torch.Tensor, input_ids: torch.Tensor,
                          logits_processor) -> AcceptedPath:
    """Greedy under logits processors (e.g. a generation config's repetition_penalty), on the device: every
    node's row is processed on its exact context (the prefix and the node's own path), one processor call per
    depth for all nodes of that depth, then the greedy walk of `greedy_path` runs on the processed rows. Two
    host reads in all (the tree's depths, the path), instead of one per accepted node."""
    depths = tree.depths.tolist()  # read 1: which nodes share a depth (their contexts have one length)
    n, levels = len(tree), max(depths) + 1
    device = logits.device
    visible = tree.ancestor_matrix()  # [N, N]
    # ancestor_at[i, d]: node i's ancestor at depth d (itself at its own depth; 0 past it, never read).
    at_depth = tree.depths[None, :, None] == torch.arange(levels, device=device)[None, None, :]  # [1, N, levels]
    ancestor_at = ((visible[:, :, None] & at_depth).long() * torch.arange(n, device=device)[None, :, None]).sum(1)
    path_tokens = tree.token_ids[ancestor_at[:, 1:]]  # [N, levels - 1]
    processed = torch.empty_like(logits)
    for depth in range(levels):
        members = [i for i, d in enumerate(depths) if d == depth]
        if not members:
            continue
        # Trees drafted by TreeDraftSession list nodes depth by depth: a slice, nothing uploaded.
        rows = slice(members[0], members[-1] + 1) if members == list(range(members[0], members[-1] + 1)) \
            else torch.tensor(members, device=device)
        count = len(members)
        context = torch.cat([input_ids.expand(count, -1), path_tokens[rows, :depth]], dim=1)
        processed[rows] = logits_processor(context, logits[rows].clone())  # some processors write in place
    path = greedy_path(tree, processed)  # read 2
    return replace(path, logits=[row[None] for row in logits[path.kept_index].unbind(0)])  # the raw rows


def check_tree_cache(cache) -> None:
    """Tree verification writes speculative entries and compacts them: it needs plain full-attention layers."""
    if not isinstance(cache, DynamicCache) or any(type(layer) is not DynamicLayer for layer in cache.layers):
        kinds = sorted({type(layer).__name__ for layer in getattr(cache, "layers", [])})
        raise ValueError(
            f"tree decoding needs a DynamicCache of full-attention layers, got {type(cache).__name__} {kinds}. "
            "Sliding-window layers are fine while the whole sequence fits their window (prompt + max_new_tokens <= "
            "sliding_window); past it, and for static, quantized and linear-attention caches, use chain drafting "
            "(model.generate(..., assistant_model=assistant)) for this model."
        )


def empty_tree_cache(model, model_kwargs: dict, max_length: int):
    """The call's cache (or a new DynamicCache), checked to be one tree verification can compact, and empty.

    Sliding-window layers (Gemma-3's local layers, Mistral's) drop nothing while the whole sequence fits in their
    window, so a generation that ends within it gets full-attention layers instead (same keys, same logits).
    """
    cache = model_kwargs.get("past_key_values")
    if cache is None:
        cache = DynamicCache(config=model.config)
    if _window_never_slides(cache, max_length):
        cache = DynamicCache()
    check_tree_cache(cache)
    if cache.get_seq_length():
        raise ValueError("tree decoding starts from an empty cache; pass the whole prompt without past_key_values")
    return cache


def _window_never_slides(cache, max_length: int) -> bool:
    """True for an empty DynamicCache with sliding-window layers, each window at least `max_length` long, and
    full-attention layers otherwise."""
    if type(cache) is not DynamicCache or cache.get_seq_length():
        return False
    windowed = [layer for layer in cache.layers if type(layer) is not DynamicLayer]
    return bool(windowed) and all(
        type(layer) is DynamicSlidingWindowLayer and layer.sliding_window >= max_length for layer in windowed)


def cache_kwargs(model, cache) -> dict:
    """`{name: cache}` for `model(**cache_kwargs(model, cache), ...)`: the name its forward takes the KV cache by
    (`modeling.drafter.cache_argument`, read from the signature, so a model class that kept the old name gets it)."""
    return {cache_argument(type(model).forward): cache}
