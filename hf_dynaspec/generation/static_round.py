"""Where the one loop's target keeps its KV: `verify_round="eager"` (a DynamicCache grown by each verify forward and
cut back to the accepted path) or `"static"` (transformers' StaticCache, sized once per call, written by position).

The static round gives every verify forward a fixed shape, so that it is compiled once per width bucket
(`torch.compile`: inductor on the CPU; CUDA graphs, mode "reduce-overhead", on a GPU) instead of being traced again
each round:

- a round's tree of n nodes is read at the next power of two W >= n (`width_bucket`): padding nodes repeat the root
  and see only themselves, as a batch's shorter trees already do, and are never accepted;
- the forward writes slots [T, T + W) of the cache (T: the committed prefix the cache holds) and attends over the
  whole capacity through the 4-D mask, which hides every slot past T but the round's own ancestors;
- the accepted path is moved to slots [T, T + m) by index, one static-shape copy per layer
  (`batched_loop._compact`), and nothing is cropped: the next forward overwrites the rest by position.

Attention layers only (sliding windows that never slide within the call count as full attention, as on the eager
round); a batch of several prompts stays eager (`check_static_batch`: its rows' kept counts differ, so their slots
would drift apart). Legend: W bucketed width, C capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer

# Room past max_length for one round's tree: the widest bucket a round may read.
MAX_WIDTH = 64
_COMPILED = "_dynaspec_static_verify"  # the compiled forward, cached on the target across calls
_CACHE = "_dynaspec_static_cache"
RECOMPILE_LIMIT = 64


def width_bucket(n: int) -> int:
    """The width a static round reads `n` nodes at: the next power of two (1, 2, 4, ..., MAX_WIDTH)."""
    if not 1 <= n <= MAX_WIDTH:
        raise ValueError(f"a static verify round reads 1 to {MAX_WIDTH} nodes, got {n}: lower the draft length or "
                         "tree_total_tokens, or use verify_round='eager'")
    return 1 << (n - 1).bit_length()


def check_static_batch(batch_size: int) -> None:
    """Refuse a batch, naming the eager route (the layers are checked where the cache is made, `_static_cache`)."""
    if batch_size != 1:
        raise ValueError("verify_round='static' decodes one prompt at a time (a batch's rows keep different "
                         "numbers of tokens): use verify_round='eager' for batches, or call generate per prompt")


class TargetSlots:
    """The target's KV cache in the one loop and how a forward addresses it (`static`: see the module docstring)."""

    def __init__(self, model, cache, max_length: int, static: bool):
        self.static = static
        self.cache, self.forward, self.capacity = cache, model, 0
        if static:
            # The cache's slots (the committed prefix and one round), a power of two so that calls of other lengths
            # reuse the cache and the compiled forwards (a new capacity or new cache tensors recompile).
            held = _static_cache(model, 1 << (max_length + MAX_WIDTH - 1).bit_length())
            self.cache, self.capacity, self.forward = held.cache, held.capacity, compiled_verify(model)

    def width(self, nodes: int) -> int:
        """The width a round of at most `nodes` nodes per row is read at."""
        return width_bucket(nodes) if self.static else nodes

    def addressed(self, past: int, width: int, device: torch.device) -> dict:
        """The forward's extra arguments: a static forward writes slots [past, past + width)."""
        if not self.static:
            return {}
        self.set_length(past)
        return {"cache_position": torch.arange(past, past + width, device=device)}

    def write_prompt(self, prompt_cache) -> None:
        """Copy a prefill's keys and values (a cache of the prompt's length) into slots [0, L) through the static
        cache's own update (by `cache_position`, or the per-layer length of transformers >= 5.18)."""
        self.set_length(0)  # a held cache's layers; a fresh one's start at 0 when the update initialises them
        for index, layer in enumerate(prompt_cache.layers):
            length = layer.keys.shape[-2]
            self.cache.update(layer.keys, layer.values, index,
                              {"cache_position": torch.arange(length, device=layer.keys.device)})

    def set_length(self, length: int) -> None:
        """Where the next write starts (transformers >= 5.18 keeps it per layer; older releases read
        `cache_position`). A host integer written into the device counter: nothing is read back."""
        for layer in self.cache.layers:
            counter = getattr(layer, "cumulative_length", None)
            if getattr(layer, "is_initialized", False) and torch.is_tensor(counter):
                counter.fill_(length)

    def cut(self, tensor: torch.Tensor, end: int) -> torch.Tensor:
        """A layer's keys or values after compaction to `end` slots: cut back (eager) or kept whole (static)."""
        return tensor if self.static else tensor[:, :, :end]


@dataclass
class _HeldCache:
    capacity: int
    cache: StaticCache
    where: tuple  # (dtype, device) of the target it was made for


def _static_cache(model, capacity: int) -> _HeldCache:
    """A StaticCache of at least `capacity` slots, kept on the target across calls: grown (to the next power of two)
    by a longer call, never shrunk, so that calls of any length share one cache and its compiled forwards. Stale
    entries are harmless: a round's mask hides every slot past the committed prefix, and each forward overwrites
    its own slots before reading them."""
    held = getattr(model, _CACHE, None)
    # A target cast or moved since its last call needs a new cache (the tensors keep the dtype and card they got).
    if held is None or held.capacity < capacity or held.where != (model.dtype, model.device):
        cache = StaticCache(config=model.config, max_cache_len=capacity)
        # The loop only gets here when no window slides within the call (tree_verify.empty_tree_cache refuses
        # otherwise), so sliding-window layers are full-attention layers for it, as on the eager round.
        if any(type(layer) not in (StaticLayer, StaticSlidingWindowLayer) for layer in cache.layers):
            kinds = sorted({type(layer).__name__ for layer in cache.layers})
            raise ValueError(f"verify_round='static' needs attention layers; this target's static cache has {kinds} "
                             "(linear-attention or other hybrid layers): use verify_round='eager'")
        cache.layers[:] = [StaticLayer(max_cache_len=capacity) for _ in cache.layers]
        held = _HeldCache(capacity, cache, (model.dtype, model.device))
        object.__setattr__(model, _CACHE, held)
    return held


def compiled_verify(model):
    """The target's forward compiled for fixed shapes, once per target object (dynamo specialises it per width
    bucket): CUDA graphs on a GPU; inductor on the CPU."""
    held = getattr(model, _COMPILED, None)
    if held is None or held[0] != model.device.type:  # a target moved to a GPU since gets CUDA graphs
        graphs = model.device.type == "cuda"
        compiled = torch.compile(model, dynamic=False, fullgraph=True, mode="reduce-overhead" if graphs else None)
        held = (model.device.type, replayed(compiled, graphs))
        object.__setattr__(model, _COMPILED, held)  # not a submodule: nn.Module would register it
    return held[1]


def replayed(compiled, graphs: bool):
    """`compiled` as the loop calls it, once per round. With CUDA graphs each call begins a graph step
    (`cudagraph_mark_step_begin`): unmarked, a replay while the last round's outputs are alive records a new child
    graph every round (cudagraph trees) in the rounds that replay no marked drafter graph (lookup, empty, tree and
    sampled rounds). Marked, the next replay (of this graph or the drafter's: one memory pool) overwrites the
    outputs, so the logits and hidden states the loop reads, and keeps for output_scores, are copied out."""
    def forward(**inputs):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        # Dynamo's limit of 8 variants is per code object, shared by every target of one class in the process:
        # widths x capacities x targets pass it legitimately (fullgraph=True then raises mid-generate()).
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            out = compiled(**inputs)
        if graphs:
            out.logits = out.logits.clone()
            if out.hidden_states is not None:
                out.hidden_states = tuple(hidden.clone() for hidden in out.hidden_states)
        return out
    return forward
