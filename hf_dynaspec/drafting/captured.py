"""A greedy chain draft of K tokens as one function of fixed shapes: what `torch.compile` and CUDA graphs capture.

Eager drafting launches every op of every step from Python: at batch 1 on a GPU that host work (tens of launches
per step: the router, the row ids, the head, the layer) costs several times the GPU work. The engines capture
the draft loop (vLLM's full graphs, SGLang's draft runners). This module is the draft after the drafter's pass
over the verified positions (`ChainDraftSession.consume_verified`, whose length varies and stays eager): K head
scorings and K - 1 one-token layer steps, unrolled, with

- every shape fixed by (K, the row budget R(t), the cache's capacity): the drafter's KV cache is the session's
  preallocated buffer (`DraftKVCache`, grown before the call, never inside), written at a position held in a
  device tensor, attention over the whole buffer under a mask that hides every slot after the step's own;
- no host value read and no Python branch on a device value: the tokens, their confidences (the top
  probability, over the rows scored) and the shortlists' ids come back as device tensors, and the round cuts the
  draft once, at its end, as the deferred path does (`ChainDraftSession._deferred_cut`);
- the router inline (`route(..., inline=True)`): a side stream inside a captured graph would only add its fork
  and join to a step whose launches are gone.

`draft_capture="compile"` (a drafting option; "eager" runs the same fixed-shape function uncompiled) compiles it
with `torch.compile(fullgraph=True)` (no graph break allowed), with mode "reduce-overhead" on CUDA: one CUDA graph
per (K bucket, rows, capacity). The default, "off", is the
eager loop; both draft the same tokens (tests/test_captured_draft.py, which also holds the compiled function to
zero graph breaks and no recompilation across positions and rounds). Greedy drafting through a runtime head
(eagle drafters) without logits processors; other rounds draft eagerly.

Legend: D embedding width, H drafter hidden, K draft tokens, T cache capacity, S columns scored.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.chain import DraftKVCache


class PositionedCache:
    """The drafter cache's buffers `[1, H_kv, T, head_dim]` as one captured step sees them: the step's key and
    value are written at `position` `[1]` (a device tensor), and the whole buffers are returned (the step's mask
    hides every slot after `position`). Implements the `update` transformers' attention modules call."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, position: torch.Tensor):
        self.keys, self.values, self.position = keys, values, position

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int = 0, *args, **kwargs):
        self.keys.index_copy_(2, self.position, key)
        self.values.index_copy_(2, self.position, value)
        return self.keys, self.values


def step_mask(slots: torch.Tensor, step_position: torch.Tensor) -> torch.Tensor:
    """`[1, 1, 1, T]`: the slots a captured step attends to, its own (just written) and every earlier one, as the
    eager step's causal attention does; later slots hold stale entries."""
    return (slots <= step_position)[None, None, None, :]


# The torch.compile backend of `draft_capture="compile"`: None is inductor (mode "reduce-overhead" on CUDA: CUDA
# graphs); a test puts a counting backend here to see every compilation.
BACKEND = None


class CapturedChainDraft:
    """The K-token greedy draft of one drafter and runtime head, run as it is (`compile=False`: the fixed-shape
    form, eager) or compiled whole (`compile=True`, fullgraph)."""

    def __init__(self, drafter, head, compile: bool):
        self.drafter = drafter
        self.head = head
        self.draft = self._draft
        self.graphs = False  # CUDA graphs replay into static buffers: each call marks a step, outputs are copied
        if compile:
            device = next(drafter.parameters()).device
            options = ({"backend": BACKEND} if BACKEND is not None
                       else {"mode": "reduce-overhead" if device.type == "cuda" else "default"})
            self.draft = torch.compile(self._draft, fullgraph=True, dynamic=False, **options)
            self.graphs = options.get("mode") == "reduce-overhead"

    def __call__(self, num_tokens: int, hidden: torch.Tensor, router_inputs: tuple[torch.Tensor, torch.Tensor],
                 cache: DraftKVCache, start: int):
        """Draft `num_tokens` greedy tokens after the drafter's last hidden `[1, 1, H]` (and the router's inputs
        for its first position, `[1, D]`, `[1, H]`), the cache's new entries written from `start` (its length when
        called). -> tokens `[1, K]`, top probabilities `[K]`, and the ids scored at each position (a list of K
        `[S_k]` tensors; None for a full head).

        K is drafted as the next power of two and cut: a round's length varies (the planner's choice, the room
        left before max_new_tokens), and each length would be a graph of its own; powers of two bound them to four
        for K <= 8. The entries past the K - 1 kept are stale, as after any crop."""
        bucket = 1 << (num_tokens - 1).bit_length()
        if bucket > 1:
            cache.reserve(start + bucket - 1)
        keys, values = cache.buffers()
        position = torch.full((1,), start, dtype=torch.long, device=hidden.device)
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        # Fresh contiguous copies ([1, 1, H] and two [1, D/H]): views into the last pass's outputs have strides that
        # change with its length, and a graph is specialised on strides.
        inputs = [t.clone(memory_format=torch.contiguous_format) for t in (hidden, *router_inputs)]
        tokens, tops, ids = self.draft(bucket, *inputs, keys, values, position)
        if self.graphs:  # the next replay overwrites them; the round reads them after it (the statistics)
            tokens, tops, ids = tokens.clone(), tops.clone(), [i if i is None else i.clone() for i in ids]
        cache.length = start + num_tokens - 1
        return tokens[:, :num_tokens], tops[:num_tokens], ids[:num_tokens]

    def _draft(self, num_tokens: int, hidden, token_embed, hidden_in, keys, values, position):
        drafter, head = self.drafter, self.head
        slots = torch.arange(keys.shape[2], device=keys.device)
        tokens, tops, ids = [], [], []
        for k in range(num_tokens):  # unrolled: K is a constant of the graph
            scores = head.scores(hidden[:, -1], head.choose_clusters(token_embed, hidden_in, k, inline=True))
            token = scores.argmax_token_ids  # [1]
            tokens.append(token)
            tops.append(scores.top_probability[0])
            ids.append(scores.token_ids)
            if k + 1 == num_tokens:
                break
            step_position = position + k  # [1]
            embeds = drafter.embed(token[:, None])  # [1, 1, D]
            token_embed, hidden_in = embeds[:, -1], hidden[:, -1]
            mask = step_mask(slots, step_position)
            hidden = drafter.step(embeds, hidden, step_position[None], PositionedCache(keys, values, step_position),
                                  mask)
        return torch.stack(tokens, dim=1), torch.stack(tops), ids
