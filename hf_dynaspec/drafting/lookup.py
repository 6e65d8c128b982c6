"""The lookup sources: drafts copied from text rather than drafted by a model. Both cost a few microseconds of
host work per drafted token and leave verification unchanged, so output stays exact.

**Prompt lookup.** Draft by copying what followed an earlier occurrence of the context's last n tokens.

Prompt lookup (Saxena 2023; transformers' `prompt_lookup_num_tokens`) is nearly free and strong exactly where a
learned drafter is weak: summaries, retrieval answers and code edits that repeat spans of the prompt or of the
answer so far. Written here rather than reusing transformers' `PromptLookupCandidateGenerator` because that class is a whole
candidate generator (its own stopping and length rules) and always falls back to 1-gram matches, which on a
150k vocabulary are mostly common tokens whose continuations lose to the drafter.

**The suffix cache.** Drafts from the longest earlier match of the context's end (SuffixDecoding, arXiv 2411.04975;
llama.cpp's n-gram cache), over the request itself and the assistant's earlier outputs.

Two indexes map every n-gram (n = 1..`max_ngram`) to the tokens that followed it, with counts:

- the request's: the prompt and the output so far (what prompt lookup reads), grown as tokens are committed;
  its continuations are the most recent ones (text that repeats tends to repeat its nearest copy);
- the shared one: the outputs of earlier generate() calls of the same assistant and any corpus the user adds
  (`add_corpus`), bounded to `max_tokens` stored tokens (oldest document out first); its continuations are the
  most frequent ones. This is what wins on repeated tasks: the same template with different inputs.

A draft extends the context token by token: at each step the longest n-gram ending the context (and the draft
so far) that either index holds picks the next token (the request's index when its match is at least as long).

Both are proposers (`PromptLookup`, `SuffixCacheProposer`) that a round offers beside the drafter; the planner
(hf_dynaspec.drafting.planning.planner) learns each source's acceptance apart.
"""

from __future__ import annotations

from collections import deque, namedtuple
from dataclasses import replace

import torch

from hf_dynaspec.drafting.contract import Draft, RoundContext
from hf_dynaspec.drafting.planning.core import MAX_MATCH_KEY, Offer, RoundPlan, match_key, position_key


def lookup_match(token_ids: torch.Tensor, max_tokens: int, min_ngram: int = 2, max_ngram: int = 3) -> tuple[torch.Tensor, int]:
    """Token ids `[N]` -> (the up to `max_tokens` ids `[n]` that followed an earlier occurrence of the last m ids,
    for the largest m in [min_ngram, max_ngram] that has one, `[0]` when none does; the length of its match, 0 when
    none). Of the occurrences, the one whose preceding ids agree with the context's for longest, the earliest among
    equals: the longest agreement picks the copy the text is following (the sentence being summarised, the line
    being edited); among equals the earliest is transformers' rule (the source text usually comes first, in the
    prompt).

    The match is the m-gram, extended backwards while the ids before the occurrence equal those before the
    context's last m ids, up to `MAX_MATCH_KEY` in all. The planner keeps acceptance per match length: a copy
    already followed for 8 ids goes on far more often than one that starts at a common 2-gram, so it is drafted
    longer (and a 1-gram match is learnt apart)."""
    num_tokens = token_ids.shape[0]
    for size in range(min(max_ngram, num_tokens - 1), min_ngram - 1, -1):
        suffix = token_ids[num_tokens - size :]
        # Window i covers i .. i+size-1 and has a continuation starting at i+size <= N-1; the suffix itself
        # (i = N-size) is excluded by stopping the windows one token short of the end.
        windows = token_ids[: num_tokens - 1].unfold(0, size, 1)
        starts = (windows == suffix).all(dim=1).nonzero()[:, 0]
        if len(starts):
            agreement = _agreeing_before(token_ids, starts, num_tokens - size, MAX_MATCH_KEY - size)
            best = int(agreement.max())
            start = int(starts[int((agreement == best).int().argmax())])  # the earliest of the longest
            return token_ids[start + size : start + size + max_tokens], size + best
    return token_ids[:0], 0


def _agreeing_before(token_ids: torch.Tensor, starts: torch.Tensor, later: int, most: int) -> torch.Tensor:
    """`[k]`: for each of `starts` (each < `later`), how many ids just before it equal those just before `later`,
    at most `most`."""
    if most <= 0:
        return torch.zeros_like(starts)
    back = torch.arange(1, most + 1, device=starts.device)
    before = starts[:, None] - back  # [k, most]: the ids before each start, nearest first
    ours = (later - back).clamp(min=0)  # those before `later` (>= 0 wherever `before` is)
    equal = (before >= 0) & (token_ids[before.clamp(min=0)] == token_ids[ours])
    return equal.int().cumprod(dim=1).sum(dim=1)


def one_hot_logits(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft ids `[1, n]` -> logits `[1, n, V]` (0 at the id, -inf elsewhere) whose softmax is exactly the
    deterministic distribution a lookup draft is drawn from. The accept/reject step then accepts token x with
    probability p(x) and resamples from p without x, which keeps sampling exact."""
    logits = torch.full((1, token_ids.shape[1], vocab_size), float("-inf"), device=token_ids.device)
    logits.scatter_(2, token_ids[..., None], 0.0)
    return logits


# -- the suffix cache ----------------------------------------------------------------------------------------
class NgramIndex:
    """n-gram (a tuple of 1..max_ngram ids) -> {next id: [count, last position]}."""

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.table: dict[tuple, dict[int, list[int]]] = {}
        self.position = 0  # running position, for recency

    def add(self, tokens: list[int], history: list[int] | None = None) -> None:
        """Index every n-gram of `history + tokens` that ends just before a token of `tokens` (`history`: the
        tokens already indexed before them, of which only the last max_ngram matter)."""
        start = self.position
        self.position += len(tokens)
        for key, token, i in self._ngrams(tokens, history):
            entry = self.table.setdefault(key, {}).setdefault(token, [0, 0])
            entry[0] += 1
            entry[1] = start + i + 1

    def remove(self, tokens: list[int]) -> None:
        """Undo `add(tokens)` (counts only; used to evict a document)."""
        for key, token, _ in self._ngrams(tokens):
            followers = self.table.get(key)
            if followers is None or token not in followers:
                continue
            followers[token][0] -= 1
            if followers[token][0] <= 0:
                del followers[token]
                if not followers:
                    del self.table[key]

    def _ngrams(self, tokens: list[int], history: list[int] | None = None):
        """(n-gram, the token after it, that token's index in `tokens`) for every n-gram of `history + tokens`
        ending just before a token of `tokens`, n = 1..max_ngram."""
        context = list(history[-self.max_ngram :]) if history else []
        for i, token in enumerate(tokens):
            for n in range(1, min(self.max_ngram, len(context)) + 1):
                yield tuple(context[-n:]), token, i
            context = (context + [token])[-self.max_ngram :]

    def longest_match(self, context: list[int], min_ngram: int) -> tuple[int, dict[int, list[int]] | None]:
        """(n, followers) for the longest n-gram ending `context` that is indexed, n >= min_ngram; (0, None)."""
        for n in range(min(self.max_ngram, len(context)), min_ngram - 1, -1):
            followers = self.table.get(tuple(context[-n:]))
            if followers:
                return n, followers
        return 0, None


# A suffix-cache draft: its tokens, which index the first token came from ("suffix-request" or "suffix-shared") and
# the length of that first match.
SuffixDraft = namedtuple("SuffixDraft", "tokens source match_length")


class SuffixCache:
    """The request index and the shared index of one assistant (see the module docstring)."""

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, max_tokens: int = 32768,
                 vocab_size: int | None = None):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"SuffixCache needs 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        self.max_ngram, self.min_ngram, self.max_tokens = max_ngram, min_ngram, max_tokens
        self.vocab_size = vocab_size  # the target's: corpus ids must index its embedding
        self.shared = NgramIndex(max_ngram)
        self.documents: deque[list[int]] = deque()
        self.stored_tokens = 0
        self.request = NgramIndex(max_ngram)
        self.request_tokens: list[int] = []
        self.prompt_length = 0

    # -- the shared part ------------------------------------------------------------------------------------
    def add_corpus(self, documents) -> None:
        """Add token-id sequences (e.g. `tokenizer(texts)["input_ids"]`: earlier answers, the files an agent
        edits) to the shared index. Every id must be one of the target's (0 <= id < vocab_size): a corpus
        tokenized with another tokenizer is refused here, not by an index error in a later generate()."""
        checked = [self._checked_ids(number, document) for number, document in enumerate(documents)]
        for tokens in checked:  # all or nothing: nothing is stored from a corpus with a bad document
            self._store(tokens)

    def _checked_ids(self, number: int, document) -> list[int]:
        tokens = [int(t) for t in document]
        bad = [t for t in tokens if t < 0 or (self.vocab_size is not None and t >= self.vocab_size)]
        if bad:
            where = "below 0" if bad[0] < 0 else f"outside the target's vocabulary of {self.vocab_size} ids"
            raise ValueError(
                f"suffix-cache corpus document {number} holds token id {bad[0]}, {where}: it was tokenized with "
                "another tokenizer. Tokenize the corpus with the target model's own tokenizer."
            )
        return tokens

    def _store(self, tokens: list[int]) -> None:
        if not tokens or len(tokens) > self.max_tokens:
            tokens = tokens[-self.max_tokens :]
        if not tokens:
            return
        self.shared.add(tokens)
        self.documents.append(tokens)
        self.stored_tokens += len(tokens)
        while self.stored_tokens > self.max_tokens:
            oldest = self.documents.popleft()
            self.shared.remove(oldest)
            self.stored_tokens -= len(oldest)

    # -- the request part -----------------------------------------------------------------------------------
    def begin_request(self, prompt_ids: list[int]) -> None:
        """Start a generate() call: the previous call's output joins the shared index; the request index is
        rebuilt over the prompt."""
        self.end_request()
        self.request = NgramIndex(self.max_ngram)
        self.request.add(prompt_ids)
        self.request_tokens = list(prompt_ids)
        self.prompt_length = len(prompt_ids)

    def end_request(self) -> None:
        output = self.request_tokens[self.prompt_length :]
        if output:
            self._store(output)
        self.request_tokens, self.prompt_length = [], 0

    def extend(self, committed: list[int]) -> None:
        """Tokens committed since the last call (the request's running text)."""
        self.request.add(committed, history=self.request_tokens)
        self.request_tokens.extend(committed)

    # -- drafting -------------------------------------------------------------------------------------------
    def draft(self, max_tokens: int) -> SuffixDraft | None:
        """Up to `max_tokens` tokens continuing the request, or None when no n-gram of at least min_ngram ids
        ending it was seen before."""
        context = self.request_tokens[-self.max_ngram :]
        draft: list[int] = []
        source, first_match = None, 0
        while len(draft) < max_tokens:
            request_n, request_next = self.request.longest_match(context, self.min_ngram)
            shared_n, shared_next = self.shared.longest_match(context, self.min_ngram)
            if request_n == 0 and shared_n == 0:
                break
            if request_n >= shared_n:
                token = max(request_next.items(), key=lambda item: item[1][1])[0]  # most recent
                step_source, step_match = "suffix-request", request_n
            else:
                token = max(shared_next.items(), key=lambda item: (item[1][0], item[1][1]))[0]  # most frequent
                step_source, step_match = "suffix-shared", shared_n
            if source is None:
                source, first_match = step_source, step_match
            draft.append(token)
            context = (context + [token])[-self.max_ngram :]
        return SuffixDraft(draft, source, first_match) if draft else None


class RequestView(SuffixCache):
    """One row's request part over `parent`'s shared part: in a batch every row searches its own running text and
    the assistant's shared index, and its output joins the shared index when the row's request ends."""

    def __init__(self, parent: SuffixCache):  # no super().__init__: the shared part is the parent's
        self.parent = parent
        self.max_ngram, self.min_ngram, self.max_tokens = parent.max_ngram, parent.min_ngram, parent.max_tokens
        self.vocab_size = parent.vocab_size
        self.request = NgramIndex(parent.max_ngram)
        self.request_tokens: list[int] = []
        self.prompt_length = 0

    @property
    def shared(self) -> NgramIndex:
        return self.parent.shared

    def _store(self, tokens: list[int]) -> None:
        self.parent._store(tokens)


# -- one call's host context: a round reads only the ids committed since the last one; lookups search it ------------
class LookupSources:
    """The host side of one generate() call's copies (one batch row): the committed context (kept while `on`: a copy
    proposer or a lattice's n-gram scorer reads it), `suffix` (None: no suffix cache) and `scorer` (a lattice's
    n-gram scorer, None: none), which both read each committed id once."""

    def __init__(self, on: bool, suffix: SuffixCache | None = None, scorer=None):
        self.suffix, self.scorer = suffix, scorer
        self.on = on or suffix is not None
        self.context: list[int] = []  # host copy of the committed ids, kept while `on`

    def begin(self, input_ids: torch.Tensor) -> None:
        """A generate() call starts on the prompt `[1, N]` (one read of the prompt while `on`)."""
        if self.on:
            self.context = input_ids[0].tolist()
        if self.suffix is not None:
            self.suffix.begin_request(self.context)

    def read(self, input_ids: torch.Tensor) -> list[int]:
        """The ids of `input_ids` `[1, N]` committed since the last read, added to the host copy and the suffix
        cache (a read of a few ids; none while off). Shapes are host values: nothing is read to compare them."""
        if not self.on or input_ids.shape[1] <= len(self.context):
            return []
        new = input_ids[0, len(self.context) :].tolist()
        self.context.extend(new)
        if self.suffix is not None:
            self.suffix.extend(new)
        if self.scorer is not None:
            self.scorer.extend(new)
        return new

    def finish(self) -> None:
        """A batch row is done: its output joins the suffix cache's shared index (a single call's joins at the next
        call's start)."""
        if isinstance(self.suffix, RequestView):
            self.suffix.end_request()

    def learn(self, planner, plan: RoundPlan, num_drafted: int, num_accepted: int) -> None:
        """After `read` of the verified round, what the copies show beyond the plan's own outcome (host ids only, no
        read): a copy drafted short and accepted whole, whether its next offered token equals the target's own token
        after it (`record_past_the_draft`); each copy offered and not drafted, whether its first token equals the
        token committed there (`record_passed_over`)."""
        if plan.next_offered is not None and num_accepted == num_drafted == plan.num_tokens:
            planner.record_past_the_draft(plan, num_accepted, self.context[-1] == plan.next_offered)
        for offer in plan.copies:
            if (offer is not plan.offer or not num_drafted) and len(self.context) > offer.at:
                planner.record_passed_over(offer, self.context[offer.at] == offer.tokens[0])


# -- the copies as proposers (contract.Proposer): priced by their match and position, each source learning its own
# rates through the request's view of the session's tables (`RequestLookup`); a copy costs the target's forward only.
class CopyProposer:
    """Copies of up to `longest` tokens from `sources`; `point_masses` (a verifier that takes the drafts'
    distributions: `assistant_model=` when sampling): a copy's logits are the point masses it is drawn from."""

    reads_features = False
    smallest = 0  # a copy no length of which pays is not drafted

    def __init__(self, sources: LookupSources, longest: int, vocab_size: int, point_masses: bool = False):
        self.sources, self.longest, self.vocab_size, self.point_masses = sources, longest, vocab_size, point_masses

    def absorb(self, context: RoundContext) -> None:
        """Nothing: a copy reads no features."""

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        """The plan's first tokens of the copy, uploaded in one copy; the plan keeps the next offered token for
        `learn` (`SpeculationPlanner.record_past_the_draft`)."""
        tokens = plan.offer.tokens
        next_offered = tokens[plan.num_tokens] if len(tokens) > plan.num_tokens else None
        ids = as_ids(list(tokens[: plan.num_tokens]), context.input_ids)[None]
        logits = one_hot_logits(ids, self.vocab_size) if self.point_masses else None
        return Draft(token_ids=ids, logits=logits, looked_up=True, plan=replace(plan, next_offered=next_offered))

    # -- pricing and learning (hf_dynaspec.drafting.planning.planner) -------------------------------------------
    @staticmethod
    def table(planner, offer: Offer):
        return planner.lookup

    @staticmethod
    def key(offer: Offer, position: int):
        return offer.source, match_key(offer.match_length), position_key(position)

    @staticmethod
    def seconds(planner, offer: Offer, k: int) -> float:
        return planner.verify(k + 1)

    def record(self, planner, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None,
               accepted_nodes=None) -> None:
        for j in range(1, min(num_accepted + 1, num_drafted) + 1):
            planner.lookup.record(self.key(plan.offer, j), j <= num_accepted)


class PromptLookup(CopyProposer):
    """What followed an earlier occurrence of the context's last `min_ngram`..`max_ngram` ids (the longest agreeing,
    `lookup_match`)."""

    def __init__(self, sources: LookupSources, longest: int, vocab_size: int, point_masses: bool = False,
                 min_ngram: int = 2, max_ngram: int = 3):
        super().__init__(sources, longest, vocab_size, point_masses)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram

    def offer(self, context: RoundContext) -> list[Offer]:
        longest, ids = min(self.longest, context.room), self.sources.context  # the host copy: a search reads nothing
        if longest < 1:
            return []
        tokens, match = lookup_match(torch.tensor(ids), longest, self.min_ngram, self.max_ngram)
        if not match or not len(tokens):
            return []
        return [Offer(self, "prompt-lookup", len(tokens), match, tuple(tokens.tolist()), len(ids))]


class SuffixCacheProposer(CopyProposer):
    """The suffix cache's draft (`SuffixCache`), labelled by the index its first token
    came from ("suffix-request" or "suffix-shared")."""

    def offer(self, context: RoundContext) -> list[Offer]:
        found = self.sources.suffix.draft(min(self.longest, context.room))
        if found is None:
            return []
        return [Offer(self, found.source, len(found.tokens), found.match_length, tuple(found.tokens),
                      len(self.sources.context))]


def as_ids(tokens: list[int], like: torch.Tensor) -> torch.Tensor:
    """Host token ids (a copy) -> `[n]` with the dtype and device of `like` (the context's ids): one upload."""
    return torch.tensor(tokens, dtype=like.dtype, device=like.device)
