"""The public routes' one decoding loop: one prompt, or several left-padded prompts in one generate() call (a
single prompt is a batch of one), each row drafting, being verified and accepting its own number of tokens in the
same target pass.

transformers' own assisted loop (the `assistant_model=` route) keeps one `input_ids` tensor and one accepted
length per step, so it cannot carry rows that accept different numbers of tokens; this loop does (`speculative_generate`,
`speculative_generate(trees=True)`, `speculative_generate` with heads take batches through it).

One target KV cache holds every active row. Each round:

1. each row's rounds (its own `SpeculationRound`: its own source, length and plan,
   the planner's tables shared) propose a tree from that row's context and target hidden states; a planner
   prices the row's draft as its share of the batch's verify forward (`SpeculationPlanner.verify`: A rows of n tokens
   cost what the measured table says for A x n tokens), its drafting as its own;
2. the trees are padded to the largest (padding nodes see only themselves and are never accepted) and read in one
   target forward: per-row positions (the row's own length: left padding does not count), one additive mask
   `[A, 1, N, T + N]` with each row's valid cache slots and its tree's ancestors;
3. each row's accepted path is chosen by the tree verifier on its own context, exactly as for one sequence;
4. the cache keeps, per row, the root and the accepted nodes, moved to the front of the round's new slots; a row
   that accepted fewer than the longest leaves slots that stay masked (`valid`) and cost only their memory;
5. committed tokens are checked per row against the stopping criteria (EOS, stop strings, `max_new_tokens` as
   plain generate counts them, on the left-padded row); a finished row leaves the batch (its cache rows dropped),
   so it costs no more work. Without an EOS token, plain generate() pads nothing and runs every row until each has
   stopped once: so does this loop (`_Lockstep`).

Output: `[B, L + n]` sequences, row b its prompt as given (left padding kept) then its tokens, then the pad token
after it finished, as plain batched `generate()` returns them.

Legend: B rows, A active rows, L padded prompt length, T cache slots, N nodes of the widest tree, V vocabulary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers.cache_utils import DynamicCache
from transformers.generation.logits_process import LogitsProcessorList, PrefixConstrainedLogitsProcessor
from transformers.generation.utils import GenerateDecoderOnlyOutput

import hf_dynaspec.sampling as sampling
from hf_dynaspec.drafting.contract import chain_tree
from hf_dynaspec.drafting.row_processing import with_sparse_warpers
from hf_dynaspec.generation.static_round import TargetSlots, check_static_batch
from hf_dynaspec.generation.tree_verify import GreedyWalk, accept_path, cache_kwargs, empty_tree_cache


@dataclass(eq=False)
class _Row:
    """One prompt of the batch while it decodes."""

    index: int  # its row in the caller's batch
    padding: int  # left padding of its prompt
    sequence: torch.Tensor  # [1, L + n]: the padded prompt and its committed tokens (the last one the root)
    drafts: object
    hidden: torch.Tensor | None  # [1, t, F]: the drafter's target features of the positions verified last

    @property
    def ids(self) -> torch.Tensor:
        """The row's own context `[1, L_b + n]` (no padding): what its drafts read (logits processors read the
        padded `sequence`, as in plain batched generate())."""
        return self.sequence[:, self.padding :]


def run_batched_rounds(model, input_ids, batch, logits_processor, stopping_criteria, generation_config, make_drafts,
                       model_kwargs: dict, verify_round: str = "eager"):
    """Decode the left-padded batch `input_ids` `[B, L]` (`batch`: its mask and lengths, from public_loop.check_batch);
    `make_drafts(prompt_ids [1, L_b], processors)` builds one row's rounds (a `DraftingRound`,
    hf_dynaspec.drafting.contract; `processors`: the row's own). Every row drafts with the same drafter, so the
    first row's rounds say which target features to return for all.
    `verify_round`: where the target's KV lives, "eager" or "static" (hf_dynaspec.generation.static_round).
    Returns `[B, L + n]` sequences (or a `GenerateDecoderOnlyOutput` holding them with `return_dict_in_generate`)."""
    cache = empty_tree_cache(model, model_kwargs, generation_config.max_length)
    if verify_round == "static":
        check_static_batch(input_ids.shape[0])
    slots = TargetSlots(model, cache, generation_config.max_length, static=verify_round == "static")
    cache = slots.cache
    do_sample = bool(generation_config.do_sample)
    mask, lengths = batch
    processors = [row_processors(logits_processor, b, len(lengths)) for b in range(len(lengths))]
    width = input_ids.shape[1]
    rows = [_Row(b, width - n, input_ids[b : b + 1], make_drafts(input_ids[b : b + 1, width - n :], processors[b]),
                 None) for b, n in enumerate(lengths)]
    features = rows[0].drafts
    valid, first_scores, first_logits = _prefill(model, features, rows, input_ids, mask, slots, processors, do_sample)
    kept = _KeptRows(generation_config, len(rows), first_scores, first_logits)
    lockstep = _Lockstep(stopping_criteria, generation_config.max_length, len(rows))
    leaving = [row for row, scores in zip(rows, first_scores)
               if lockstep.after_prefill(row, bool(stopping_criteria(row.sequence, scores).any()))]
    active, ended = lockstep.ended([row for row in rows if row not in leaving])
    for row in leaving + ended:
        row.drafts.finish()
    cache, valid = _keep(cache, valid, rows, active)
    while active:
        # the planners price each row's draft as its share of this batch's verify forward
        drafts = [row.drafts.propose(row.ids, row.hidden, max(lockstep.length - row.sequence.shape[1] - 1, 0),
                                     len(active)) for row in active]
        # As the verifier reads a draft: its tree, or its chain as one branch under the row's last token.
        trees = [draft.tree if draft.tree is not None else chain_tree(row.sequence[0, -1:], draft.token_ids[0])
                 for draft, row in zip(drafts, active)]
        out = _verify(model, features, active, trees, valid, slots)
        # Processors see the left-padded row, as plain batched generate() hands it to them (min_new_tokens counts
        # from the padded prompt length generate() measured); drafts see the row's own tokens.
        paths = _accepted_paths(active, trees, out.logits, processors, do_sample)
        valid = _compact(slots, valid, [path.kept_index for path in paths])
        hidden = features.select_target_hidden(out.hidden_states)
        still, leaving = [], []
        flags = _stop_flags(active, paths, stopping_criteria)
        for i, (row, draft, path, stops) in enumerate(zip(active, drafts, paths, flags)):
            row.hidden = None if hidden is None else hidden[i : i + 1, path.kept_index]  # None: no drafter
            committed, leaves = lockstep.after_round(row, stops)
            row.sequence = torch.cat([row.sequence, path.new_tokens[None, :committed]], dim=1)
            kept.add(path, committed)
            row.drafts.learn(draft, row.ids, committed - 1, path.nodes[: committed - 1])
            (leaving if leaves else still).append(row)
        still, ended = lockstep.ended(still)
        for row in leaving + ended:
            row.drafts.finish()
        cache, valid = _keep(cache, valid, active, still)
        active = still
    lockstep.cut(rows)
    # Every row's sequence, in the caller's order, right-padded to the longest `[B, L + n]`.
    sequences = pad_sequence([row.sequence[0] for row in rows], batch_first=True,
                             padding_value=_pad_token(generation_config, input_ids))
    if generation_config.return_dict_in_generate:
        # One row's cache holds exactly its sequence but the last token (a batch's lost its finished rows; a static
        # one is the target's, used again by its next call).
        one_row = len(rows) == 1 and generation_config.use_cache and not slots.static
        scores, logits = (None if kept_rows is None else tuple(kept_rows) for kept_rows in (kept.scores, kept.logits))
        return GenerateDecoderOnlyOutput(sequences=sequences, scores=scores, logits=logits,
                                         past_key_values=cache if one_row else None)
    return sequences


class _KeptRows:
    """The per-token processed scores and raw logits `[1, V]` a single prompt returns when asked
    (`return_dict_in_generate` with `output_scores` / `output_logits`; batches refuse them, `check_batch`). Kept only
    then: each row is a full-vocabulary fp32 row (0.6-1 MiB at 150k-260k tokens), GBs over a long output."""

    def __init__(self, generation_config, batch_size: int, first_scores: list, first_logits: list):
        returned = bool(generation_config.return_dict_in_generate) and batch_size == 1
        self.scores = list(first_scores) if returned and generation_config.output_scores else None
        self.logits = list(first_logits) if returned and generation_config.output_logits else None

    def add(self, path, committed: int) -> None:
        for kept, rows in ((self.scores, path.scores), (self.logits, path.logits)):
            if kept is not None:
                kept.extend(rows[:committed])


def row_processors(logits_processor, row: int, batch_size: int) -> LogitsProcessorList:
    """The call's processors for one row, called with that row alone (`[1, L]`): a processor holding a per-row
    tensor built for the batch (the repetition penalty's per-row prompt padding, `[B]`) gets a copy holding its row.
    Prefix-constrained generation calls its function with a batch index, which a row alone cannot give: refused."""
    own = LogitsProcessorList()
    for processor in logits_processor:
        if isinstance(processor, PrefixConstrainedLogitsProcessor):
            raise ValueError("prefix_allowed_tokens_fn takes the batch index of each row, which batched speculative "
                             "decoding does not keep; call generate once per prompt, or drop it")
        per_row = {name: value for name, value in vars(processor).items()
                   if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == batch_size > 1}
        if per_row:
            processor = copy.copy(processor)
            for name, value in per_row.items():
                setattr(processor, name, value[row : row + 1])
        own.append(processor)
    return with_sparse_warpers(own)


def _prefill(model, features, rows, input_ids, mask, slots, processors, do_sample):
    """The target's pass over the padded prompts (eager in either round: its shape is the prompt's): each row's
    first token appended, its prompt features kept;
    -> (the cache's valid slots `[B, L]`, each row's processed scores and raw logits `[1, V]`)."""
    positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)
    # The static round's prefill runs over a cache of the prompt's own length and is then written into the static
    # slots: over the static cache itself its mask would span the capacity, [B, L, capacity] (GBs at long prompts).
    cache = DynamicCache() if slots.static else slots.cache
    out = model(input_ids=input_ids, attention_mask=mask.long(), position_ids=positions, **cache_kwargs(model, cache),
                use_cache=True, output_hidden_states=features.hidden_state_selection(), logits_to_keep=1)
    if slots.static:
        slots.write_prompt(cache)
    hidden = features.select_target_hidden(out.hidden_states)
    scores, raw = [], []
    for b, row in enumerate(rows):
        logits = out.logits[b : b + 1, -1].float()
        own = processors[row.index]
        processed = own(row.sequence, logits) if len(own) else logits
        token = sampling.sample(processed.softmax(dim=-1)) if do_sample else processed.argmax(-1, keepdim=True)
        row.hidden = None if hidden is None else hidden[b : b + 1, row.padding :]
        row.sequence = torch.cat([row.sequence, token], dim=1)
        scores.append(processed)
        raw.append(logits)
    return mask.clone(), scores, raw


def _verify(model, features, rows, trees, valid, slots):
    """One target forward over every row's tree, padded to the widest `[A, N]` (static: to its width bucket)."""
    width = slots.width(max(len(tree) for tree in trees))
    past = valid.shape[1]
    device = valid.device
    # Padding nodes repeat the root at the root's position: ordinary inputs, masked from every real node.
    tokens = torch.stack([_padded(tree.token_ids, width, tree.token_ids[:1]) for tree in trees])
    positions = torch.stack([_padded(tree.depths, width, tree.depths[:1]) + row.ids.shape[1] - 1
                             for row, tree in zip(rows, trees)])
    keys = slots.capacity if slots.static else past + width  # the slots the forward attends over
    visible = torch.zeros(len(rows), width, keys, dtype=torch.bool, device=device)
    visible[:, :, :past] = valid[:, None, :]
    visible[:, :, past : past + width] = torch.eye(width, dtype=torch.bool, device=device)  # padding: itself only
    for i, tree in enumerate(trees):
        n = len(tree)
        visible[i, :n, past : past + n] = tree.ancestor_matrix()
    # The additive `[A, 1, N, K]` mask every attention implementation reads the same way (transformers passes a 4-D
    # mask through untouched).
    mask = torch.zeros(visible.shape, dtype=model.dtype, device=device)
    mask.masked_fill_(~visible, torch.finfo(model.dtype).min)
    return slots.forward(input_ids=tokens, position_ids=positions, attention_mask=mask[:, None],
                         **cache_kwargs(model, slots.cache), use_cache=True,
                         output_hidden_states=features.hidden_state_selection(),
                         **slots.addressed(past, width, device))


def _padded(values: torch.Tensor, width: int, fill: torch.Tensor) -> torch.Tensor:
    """`values` `[n]` followed by `fill` `[1]` repeated to `[width]` (on their device, nothing read)."""
    return torch.cat([values, fill.expand(width - values.shape[0])])


def _compact(slots: TargetSlots, valid: torch.Tensor, kept: list[torch.Tensor]) -> torch.Tensor:
    """Keep, per row, the round's kept nodes `kept[i]` (root first) at the front of the round's slots; the slots
    past a row's count stay masked. -> the new valid mask `[A, T + M]`, M the most kept by a row.

    Written in place (the kept entries moved to the front of the round's slots, the rest cut off as a view): no
    copy of the whole cache per round. Nothing is read or uploaded:
    the index and the mask are built on the device from the kept tensors and host lengths."""
    past = valid.shape[1]
    most = max(k.shape[0] for k in kept)
    index = torch.stack([torch.cat([k, k.new_zeros(most - k.shape[0])]) for k in kept]) + past  # [A, M]
    on_device = {}
    for layer in slots.cache.layers:
        device = layer.keys.device
        if device not in on_device:  # a layer-split target: each layer's index on that layer's device
            on_device[device] = index.to(device)[:, None, :, None]
        gather = on_device[device]
        for name in ("keys", "values"):
            tensor = getattr(layer, name)
            moved = tensor.gather(2, gather.expand(-1, tensor.shape[1], -1, tensor.shape[3]))
            tensor[:, :, past : past + most] = moved
            setattr(layer, name, slots.cut(tensor, past + most))
    slots = torch.arange(most, device=valid.device)
    fresh = torch.stack([slots < k.shape[0] for k in kept])
    return torch.cat([valid, fresh], dim=1)


def _keep(cache: DynamicCache, valid: torch.Tensor, rows: list, kept_rows: list):
    """Drop the rows that finished from the cache and the valid mask (they cost no more work). Each layer gets the
    row index on its own device (a target split over cards keeps its layers' caches there)."""
    if len(kept_rows) == len(rows) or not kept_rows:  # none left: the loop ends, nothing to index
        return cache, valid
    # One upload, when a row finishes; a layer on another card (a split target) gets a copy from the device.
    index = torch.tensor([i for i, row in enumerate(rows) if row in kept_rows], dtype=torch.long).to(valid.device)
    for layer in cache.layers:
        layer.batch_select_indices(index.to(layer.keys.device))
    return cache, valid[index]


def _accepted_paths(rows: list, trees: list, logits: torch.Tensor, processors: list, do_sample: bool) -> list:
    """Each row's accepted path from the batch's verify logits `[A, N, V]`. Greedy without processors: every row's
    walk on the device, then one host read for the whole batch; otherwise row by row (`accept_path`: the sampled
    walk reads per node, processed greedy twice per row)."""
    rows_logits = [logits[i, : len(tree)].float() for i, tree in enumerate(trees)]
    if do_sample or any(len(processors[row.index]) for row in rows):
        return [accept_path(tree, row_logits, row.sequence, processors[row.index], do_sample)
                for row, tree, row_logits in zip(rows, trees, rows_logits)]
    walks = [GreedyWalk.on_device(tree, row_logits) for tree, row_logits in zip(trees, rows_logits)]
    host = _read_rows([walk.host for walk in walks])  # the round's one read of every row's path
    return [walk.finish(row) for walk, row in zip(walks, host)]


def _stop_flags(rows: list, paths: list, stopping_criteria) -> list[list[bool]]:
    """Per row, per accepted token: does the row's prefix up to it meet the stopping criteria (on the padded row,
    as plain generate sees it)? One host read for every row's checks."""
    flags = []
    for row, path in zip(rows, paths):
        extended = torch.cat([row.sequence, path.new_tokens[None]], dim=1)
        length = row.sequence.shape[1]
        flags.append(torch.stack([stopping_criteria(extended[:, : length + i + 1], processed).any()
                                  for i, processed in enumerate(path.scores)]))
    return _read_rows(flags)


def _read_rows(rows: list[torch.Tensor]) -> list[list]:
    """Each of `rows` (1-D, on the device) as a host list, read in one copy for them all."""
    host, start, split = torch.cat(rows).tolist(), 0, []
    for row in rows:
        split.append(host[start : start + row.shape[0]])
        start += row.shape[0]
    return split


class _Lockstep:
    """When a row stops, as plain batched generate() decides it.

    With an EOS criterion among the stopping criteria, generate() pads a row from the token whose prefix met a
    criterion on: the row commits up to that token and leaves the batch. Without one (stop strings or custom criteria
    alone), generate() pads nothing: every row keeps generating, a token per step, until each row has met a criterion
    once, and all rows end at that step. Rows here advance at their own pace, so there a row that has stopped keeps
    decoding, and `length` (every row's final length) is known once every row has stopped."""

    def __init__(self, stopping_criteria, max_length: int, batch_size: int):
        self.pads = any(hasattr(criterion, "eos_token_id") for criterion in stopping_criteria)
        self.length, self.batch_size = max_length, batch_size
        self.first_stops: dict[int, int] = {}  # without padding: row index -> its length at its first stop

    def after_prefill(self, row: _Row, stopped: bool) -> bool:
        """The prompt's first token (already in `row.sequence`) met a criterion or not -> the row leaves."""
        if self.pads:
            return stopped
        if stopped:
            self.first_stops.setdefault(row.index, row.sequence.shape[1])
        return row.sequence.shape[1] >= self.length

    def after_round(self, row: _Row, stops: list[bool]) -> tuple[int, bool]:
        """A round's accepted tokens' `stops` (`_stop_flags`) -> (tokens to commit, the row leaves)."""
        first = stops.index(True) + 1 if True in stops else None
        if self.pads:
            return (first or len(stops)), first is not None
        if first is not None:
            self.first_stops.setdefault(row.index, row.sequence.shape[1] + first)
        return len(stops), row.sequence.shape[1] + len(stops) >= self.length

    def ended(self, rows: list) -> tuple[list, list]:
        """Without padding, once every row has stopped, the rows at the common length leave: -> (still, ended)."""
        if self.pads or len(self.first_stops) < self.batch_size:
            return rows, []
        self.length = min(self.length, max(self.first_stops.values()))
        return ([row for row in rows if row.sequence.shape[1] < self.length],
                [row for row in rows if row.sequence.shape[1] >= self.length])

    def cut(self, rows: list) -> None:
        """Without padding, rows that ran past the common length (a path accepted beyond it) end there."""
        if not self.pads:
            for row in rows:
                row.sequence = row.sequence[:, : self.length]


def _pad_token(generation_config, input_ids: torch.Tensor) -> int:
    for name in ("_pad_token_tensor", "_eos_token_tensor"):
        value = getattr(generation_config, name, None)
        if value is not None and value.numel():
            return int(value.reshape(-1)[0])
    return generation_config.pad_token_id if generation_config.pad_token_id is not None else 0
