"""Chain drafting: turn the target's verified hidden states into K draft tokens.

One `ChainDraftSession` lives for one `generate()` call. Its drafter cache holds one entry per *pair*
(target feature of position i, token i+1) for every verified position, plus the speculative entries of the
last draft, which are dropped at the start of the next round. Each round runs K drafter steps: the first
consumes every newly verified position at once, the others one drafted token each.

The drafter's attention keys and values live in a `DraftKVCache`: buffers that grow by doubling and roll back to
the verified prefix after each verification, so a draft step appends without the `torch.cat` (a fresh allocation
of the whole cache) transformers' `DynamicCache` would make.

Legend: B batch (always 1 here), T tokens, D target hidden, H drafter hidden, V target vocab, S shortlist,
K draft tokens.
"""

from __future__ import annotations

import torch

import hf_dynaspec.sampling as sampling
from hf_dynaspec.drafting.contract import Draft
from hf_dynaspec.drafting.device_paths import use_accelerator_paths
from hf_dynaspec.drafting.row_processing import on_rows, process_rows, widen
from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput
from hf_dynaspec.modeling.drafter import Drafter, causal_mask


class DraftKVCache:
    """Keys and values of one attention layer, `[1, H_kv, T, head_dim]` views into growing buffers.

    Implements the `update(key, value, layer_idx, ...)` method transformers' attention modules call.
    """

    def __init__(self, initial_capacity: int = 256):
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._initial_capacity = initial_capacity
        self.length = 0

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int = 0, *args, **kwargs):
        new = key.shape[-2]
        needed = self.length + new
        if self._keys is None or needed > self._keys.shape[-2]:
            self._grow(key, value, needed)
        self._keys[..., self.length : needed, :] = key
        self._values[..., self.length : needed, :] = value
        self.length = needed
        return self._keys[..., :needed, :], self._values[..., :needed, :]

    def _grow(self, key: torch.Tensor, value: torch.Tensor, needed: int) -> None:
        capacity = max(self._initial_capacity, needed)
        if self._keys is not None:
            capacity = max(capacity, 2 * self._keys.shape[-2])
        # Zeros, not uninitialised memory: a captured step (drafting/captured.py) attends over the whole buffer
        # under a mask, and a masked NaN would still reach the output (0 x NaN).
        keys = key.new_zeros(*key.shape[:-2], capacity, key.shape[-1])
        values = value.new_zeros(*value.shape[:-2], capacity, value.shape[-1])
        if self._keys is not None and self.length:
            keys[..., : self.length, :] = self._keys[..., : self.length, :]
            values[..., : self.length, :] = self._values[..., : self.length, :]
        self._keys, self._values = keys, values

    def reserve(self, length: int) -> None:
        """Make room for `length` positions now (a captured draft writes into the buffers and cannot grow them)."""
        if self._keys is None:
            raise ValueError("reserve() needs the cache's first entries (their shapes and dtype)")
        if length > self._keys.shape[-2]:
            self._grow(self._keys[..., :0, :], self._values[..., :0, :], length)

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole key and value buffers `[1, H_kv, capacity, head_dim]` (positions past `length` are stale)."""
        if self._keys is None:
            raise ValueError("the draft cache is empty")
        return self._keys, self._values

    def crop(self, length: int) -> None:
        """Forget every position at or after `length` (an absolute length, not a count to remove)."""
        if length < 0 or length > self.length:
            raise ValueError(f"cannot crop a draft cache of length {self.length} to {length}")
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length


class ChainDraftSession:
    """Drafting state of one generate() call.

    `head` is the runtime shortlist head (hf_dynaspec.drafting.selector) an eagle drafter scores through;
    None uses the drafter's own head (EAGLE-3's reduced vocabulary). With `confidence` > 0 a round stops before
    the first position where the drafter's most likely token has a probability below it, possibly with no token
    at all: where verifying k tokens costs much more than one (CPUs), an unlikely draft costs more than it is
    expected to save.

    Why sampling stays exact: the stop reads the drafter's distribution q_k at position k *before* a token is
    drawn from it (its largest probability), never the drawn token. Whether position k is drafted is then a
    function of the context (prompt and the tokens drafted before k, which are the committed ones whenever
    position k is verified at all), and when it is drafted the token is an unconditioned sample of q_k, the very
    distribution handed to the verifier. Stopping on q_k(x) of the sampled x instead would keep x more often
    where q_k(x) is large, so the verifier would see drafts from a distribution other than q_k
    (tests/test_enumeration.py computes the resulting bias exactly). Greedy drafting is unchanged: its token is
    the most likely one.

    Host decisions: on the CPU the confidence stop ends a round at once (a value read on the host costs nothing
    there, and every skipped step saves a drafter pass). On an accelerator (`defer_host_decisions`, the default
    off the CPU, see drafting/device_paths.py) every step's token and confidence stay on the device and the round reads them back once, at
    its end, cutting the draft before the first unconfident position: the same draft, one host sync per round
    instead of one per step (tests/test_sync_budget.py counts them).
    """

    def __init__(self, drafter: Drafter, vocab_size: int, do_sample: bool, logits_processor=None, head=None,
                 confidence: float = 0.0, captured=None):
        if head is None and not drafter.has_own_head:
            raise ValueError("an eagle drafter scores the target's head through a runtime head: pass head=")
        self.drafter = drafter
        self.head = head
        self.vocab_size = vocab_size
        self.confidence = confidence
        self.do_sample = do_sample
        self.logits_processor = logits_processor if logits_processor is not None and len(logits_processor) else None
        self.cache = DraftKVCache()
        self.num_verified_pairs = 0  # drafter cache entries computed from target features
        # [1, P, F] target features of verified positions not absorbed yet (rounds drafted by lookup or not at all
        # defer the drafter's pass: see `defer_verified`)
        self.pending_hidden: torch.Tensor | None = None
        self.shortlist_ids = drafter.draft_to_target_ids() if drafter.has_own_head else None
        self.defer_host_decisions = use_accelerator_paths(next(drafter.parameters()).device)
        # The fixed-shape K-token draft (drafting/captured.py), for greedy drafting without processors.
        self.captured = captured if not do_sample and self.logits_processor is None else None
        self._router_inputs: tuple[torch.Tensor, torch.Tensor] | None = None  # of the last verified position

    @torch.no_grad()
    def draft(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor, cap: int, rule=None,
              first=None) -> Draft:
        """Draft up to `cap` tokens continuing `input_ids` `[1, N]` (fewer under `confidence` or `rule`).

        `new_target_hidden` `[1, >=T_new, D or 3D]`: target features from the last verification pass, whose
        first `T_new = N - 1 - (pairs already cached)` positions are now verified. `first`: this round's
        `first_position` (the verified positions absorbed, the first position scored), continued from. `rule`:
        the draft's length rule (`keep_position`, `draft_more`, `cut` over the drafted positions' top
        probabilities: a planned chain's `ConfidenceRule`), read before each position's token is drawn, or once at
        the end where host decisions are deferred (accelerators). The drafted positions' top probabilities come back
        in `Draft.confidences`."""
        if first is None and self.captured is not None and cap >= 1:
            return self._captured_draft(input_ids, new_target_hidden, cap, rule)
        if first is not None:  # the first position already scored (the veto's check)
            hidden, clusters, scores = first
        else:  # scored in the loop, as every later position
            (hidden, clusters), scores = self.consume_verified(input_ids, new_target_hidden), None
        host_rule = rule is not None and not self.defer_host_decisions
        # per drafted position: its token, the ids scored there, (sampling) its logits, confident and tops (_cut)
        tokens, scored, logits, confident, tops = [], [], [], [], []
        context = input_ids
        for k in range(cap):
            if k or scores is None:
                scores = self.score(hidden[:, -1], clusters)
            token_id, drawn, is_confident, top = self._choose(scores, context, with_top=rule is not None)
            if token_id is None:  # the drafter is not confident enough at this position
                break
            top = float(top) if host_rule else top  # one read per position, on the CPU form only
            if host_rule and not rule.keep_position(tops + [top]):  # reads the distribution, not the token
                break
            tops.append(top)
            tokens.append(token_id)
            scored.append(scores.token_ids)
            confident.append(is_confident)
            logits += [] if drawn is None else [drawn]
            if k + 1 == cap or (host_rule and not rule.draft_more(tops, cap)):
                break
            if self.logits_processor is not None:  # only processors read the drafted context
                context = torch.cat([context, token_id], dim=1)
            # The drafter's step on draft k, continuing the context: the router (on the side stream where there is
            # one) is started on the step's inputs before the layer runs, for position k + 1.
            position_ids = torch.full((1, 1), input_ids.shape[1] - 1 + k, device=token_id.device, dtype=torch.long)
            token_embed = self.drafter.embed(token_id)
            clusters = self.chosen_clusters(token_embed[:, -1], hidden[:, -1], k + 1)
            hidden = self.drafter.step(token_embed, hidden, position_ids, self.cache, None)
        return self._cut(input_ids, tokens, scored, logits, confident, tops, rule)

    def first_position(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor):
        """The drafter run over the verified positions of `input_ids` `[1, N]` and scored at the first draft
        position: `(hidden, clusters, scores)`, which a policy reads (the veto) and `draft(first=...)` continues."""
        hidden, clusters = self.consume_verified(input_ids, new_target_hidden)
        return hidden, clusters, self.score(hidden[:, -1], clusters)

    def _cut(self, input_ids, tokens: list, scored: list, logits: list, confident: list, tops: list, rule) -> Draft:
        """The draft of the positions kept: all of them, or where host decisions are deferred, those before the
        first unconfident position and within `rule`'s cut (one read of the values left on the device)."""
        if self.defer_host_decisions and tokens and (confident[0] is not None or rule is not None):
            keep, tops = self._deferred_cut(torch.stack(confident) if confident[0] is not None else None,
                                            torch.stack(tops) if rule is not None else None, len(tops), rule)
            tokens, scored, logits = tokens[:keep], scored[:keep], logits[:keep]
        return Draft(
            token_ids=torch.cat(tokens, dim=1) if tokens else input_ids.new_empty((1, 0)),
            logits=torch.stack(logits, dim=1) if logits else None,
            confidences=tops[: len(tokens)], shortlists=scored,
        )

    def _captured_draft(self, input_ids, new_target_hidden, num_draft_tokens: int, rule) -> Draft:
        """The round's draft through the captured K-token function: K tokens drafted, then cut once, at the end,
        by the confidence stop and the planner, as the deferred path cuts (the same draft)."""
        hidden, _ = self.consume_verified(input_ids, new_target_hidden, choose=False)
        tokens, tops, ids = self.captured(num_draft_tokens, hidden, self._router_inputs, self.cache,
                                          input_ids.shape[1] - 1)
        confident = tops >= self.confidence if self.confidence > 0.0 else None  # [K], on the device
        keep, host_tops = num_draft_tokens, []
        if confident is not None or rule is not None:
            keep, host_tops = self._deferred_cut(confident, tops, num_draft_tokens, rule)
        return Draft(token_ids=tokens[:, :keep], logits=None, confidences=host_tops[:keep], shortlists=ids[:keep])

    @staticmethod
    def _deferred_cut(confident: torch.Tensor | None, tops: torch.Tensor | None, drafted: int,
                      rule) -> tuple[int, list[float]]:
        """How many of the `drafted` positions to keep, from the values left on the device (`confident` `[K]` bool,
        None with the confidence stop off; `tops` `[K]`, read for the length rule): the round's one host sync."""
        rows = []
        if confident is not None:
            rows.append(confident.float().cumprod(0))
        if rule is not None:
            rows.append(tops.float())
        values = torch.stack(rows).tolist()  # the one sync
        keep = int(sum(values[0])) if confident is not None else drafted
        if rule is None:
            return keep, []
        host_tops = values[-1]
        return min(keep, rule.cut(host_tops)), host_tops

    def defer_verified(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor) -> None:
        """Keep the features of the newly verified positions of `input_ids` `[1, N]` for the next
        `consume_verified` instead of running the drafter over them now: a round that drafts by lookup, or not
        at all, does not need the drafter, and one pass over all the positions kept costs about what a pass over
        the last round's costs (positions go through the drafter's layer together). Shapes only: no read."""
        pending = 0 if self.pending_hidden is None else self.pending_hidden.shape[1]
        num_new = input_ids.shape[1] - 1 - self.num_verified_pairs - pending
        if num_new < 1 or new_target_hidden.shape[1] < num_new:
            raise RuntimeError(f"drafter out of step with the target: {num_new} new verified positions, "
                               f"{new_target_hidden.shape[1]} target hidden states")
        piece = new_target_hidden[:, :num_new]
        self.pending_hidden = piece if self.pending_hidden is None else torch.cat([self.pending_hidden, piece], 1)

    @torch.no_grad()
    def consume_verified(self, input_ids: torch.Tensor, new_target_hidden: torch.Tensor, choose: bool = True):
        """Run the drafter over the newly verified positions; return its last hidden `[1, 1, H]` (which predicts
        the token after `input_ids`) and the router's choice for draft position 0 (None with `choose=False`: a pass
        that only brings the drafter's cache up to date, as calibration times it).

        Drops the speculative entries of the previous draft from the drafter cache first, and absorbs the
        positions deferred since (`defer_verified`) in the same pass.
        """
        self.defer_verified(input_ids, new_target_hidden)  # checks the counts; the positions waiting, then these
        new_target_hidden, self.pending_hidden = self.pending_hidden, None
        seq_len = input_ids.shape[1]
        start = self.num_verified_pairs
        num_new = seq_len - 1 - start
        drafter = self.drafter
        device = input_ids.device
        self.cache.crop(start)
        hidden_in = drafter.fuse_target_hidden(new_target_hidden)
        token_embeds = drafter.embed(input_ids[:, start + 1 : seq_len])
        position_ids = torch.arange(start, seq_len - 1, device=device)[None]
        # The router reads the inputs of the step whose output it shortlists (E(x_t), h_{t-1}): it is started
        # before the drafter's layer so that on CUDA the two overlap.
        self._router_inputs = (token_embeds[:, -1], hidden_in[:, -1])
        clusters = self.chosen_clusters(token_embeds[:, -1], hidden_in[:, -1], 0) if choose else None
        # The mask reads the cache's own length, so a cache out of step with `start` shows up as wrong drafts
        # (tests/test_drafting.py compares the cache with a recomputation), not as a shape error deep in attention.
        mask = causal_mask(num_new, self.cache.length, device)
        hidden = drafter.step(token_embeds, hidden_in, position_ids, self.cache, mask)
        self.num_verified_pairs = seq_len - 1
        return hidden[:, -1:], clusters

    def chosen_clusters(self, token_embed: torch.Tensor, hidden_in: torch.Tensor, position: int):
        return self.head.choose_clusters(token_embed, hidden_in, position) if self.head is not None else None

    def score(self, hidden: torch.Tensor, clusters) -> ShortlistHeadOutput:
        """Hidden `[R, H]` (and the router's choice for their position) -> the scores `[R, S]` of the rows scored
        and their target ids `[S]` (None when the rows are the whole vocabulary; -1 in padding columns)."""
        if self.head is not None:
            return self.head.scores(hidden, clusters)
        return ShortlistHeadOutput(self.drafter.draft_vocab_logits(hidden).float(), self.shortlist_ids)

    def _choose(self, scores: ShortlistHeadOutput, context, with_top: bool = False):
        """-> (draft token id `[1, 1]`, or None to stop the round under `confidence`; the full-vocabulary logits
        `[1, V]` the token was drawn from when sampling, else None; whether the position passes `confidence`, a
        0-d bool tensor, or None with the threshold off; with `with_top`, the distribution's largest probability
        as a 0-d tensor, else None).

        The confidence test reads only the distribution, before any draw (see the class docstring); deferred, the
        token is drawn anyway and the round's end drops it."""
        full = rows = None  # processed logits over the vocabulary, or over the shortlist's rows (row_processing)
        if self.do_sample or self.logits_processor is not None:
            if scores.token_ids is not None and on_rows(self.logits_processor):
                rows = process_rows(self.logits_processor, context, scores.scores, scores.token_ids)
            else:
                full = self._to_full_vocab(scores.scores, scores.token_ids)
                if self.logits_processor is not None:
                    full = self.logits_processor(context, full)
        processed = full if rows is None else rows
        confident = None  # is the largest probability at least `confidence`? (over the rows scored: renormalised)
        if self.confidence > 0.0:
            confident = (scores.scores if processed is None else processed).float().softmax(-1).max() >= self.confidence
        if confident is not None and not self.defer_host_decisions and not bool(confident):
            return None, None, None, None
        top = None
        if with_top:  # over the rows scored, like the confidence stop
            top = scores.top_probability[0] if processed is None else processed[0].float().softmax(-1).max()
        if processed is None:
            return scores.argmax_token_ids[:, None], None, confident, top
        if rows is not None:  # drawn among the rows; q handed over as drawn, widened (0 outside the rows)
            column = sampling.sample(rows.softmax(dim=-1)) if self.do_sample else rows.argmax(dim=-1, keepdim=True)
            drawn = widen(rows, scores.token_ids, self.vocab_size) if self.do_sample else None
            return scores.token_ids[column], drawn, confident, top
        if self.do_sample:
            return sampling.sample(full.softmax(dim=-1)), full, confident, top
        return full.argmax(dim=-1, keepdim=True), None, confident, top

    def _to_full_vocab(self, logits: torch.Tensor, shortlist_ids: torch.Tensor | None) -> torch.Tensor:
        """Shortlist logits `[1, S]` -> `[1, V]` with -inf outside the shortlist (padding columns, id -1, land in
        a spare column that is cut off)."""
        if shortlist_ids is None:
            if logits.shape[-1] != self.vocab_size:  # head rows beyond the tokenizer are still rows
                raise RuntimeError(f"drafter head has {logits.shape[-1]} rows, target {self.vocab_size}")
            return logits
        return widen(logits, shortlist_ids, self.vocab_size)
