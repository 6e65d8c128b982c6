"""The call's stopping criteria checked at every accepted token on the `assistant_model=` route.

transformers' assisted loop commits a round's accepted tokens together, crops them itself at the first EOS and at
`max_length` only, and checks every other criterion (stop strings, a user's `StoppingCriteria`, `max_time`) on the
sequence's end only. Plain `generate()` checks them after every token, so a stop string completed inside a round
would be passed over and the output would run on to the round's end. `EveryTokenStops` checks each committed prefix
as plain decoding would, stops the loop at the first that meets a criterion, and holds the round's tokens back from
the streamer until they are checked; `cut` then ends the output there. The sequence's tokens up to the cut are the
ones the loop committed, so greedy output and sampled distributions stay those of plain decoding.

A criterion is called once per accepted token rather than once per round, read back once per round (plain
decoding syncs once per token); calls whose only criteria transformers already crops (EOS, max length) are left alone.
"""

from __future__ import annotations

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from hf_dynaspec.modeling.drafter import output_cache

CROPPED_BY_TRANSFORMERS = (EosTokenCriteria, MaxLengthCriteria)


class HeldStreamer(BaseStreamer):
    """A streamer proxy that holds a round's tokens until `EveryTokenStops` has checked them."""

    def __init__(self, streamer: BaseStreamer):
        self.streamer = streamer
        self.held: torch.Tensor | None = None

    def put(self, value: torch.Tensor) -> None:
        self.release(None)
        self.held = value

    def release(self, keep: int | None) -> None:
        """Pass on the held tokens, only their first `keep` (None: all)."""
        held, self.held = self.held, None
        if held is not None and keep != 0:
            self.streamer.put(held if keep is None else held[..., :keep])

    def end(self) -> None:
        self.release(None)
        self.streamer.end()


class EveryTokenStops(StoppingCriteriaList):
    """The call's criteria over every prefix committed since the last check (batch 1: transformers' assisted
    loop runs one row). `stop_length`: the length of the first sequence that met a criterion, else None."""

    def __init__(self, criteria: StoppingCriteriaList, prompt_length: int, streamer: HeldStreamer | None):
        super().__init__(criteria)
        self.checked_length = prompt_length
        self.stop_length: int | None = None
        self.streamer = streamer

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        length = input_ids.shape[1]
        # Every token committed since the last check (a call with none new, as transformers 5.8 makes, checks the
        # last one again).
        first = min(self.checked_length, length - 1) + 1
        prefixes = range(first, length + 1)
        met = torch.stack([super(EveryTokenStops, self).__call__(input_ids[:, :prefix], scores, **kwargs).any()
                           for prefix in prefixes]).tolist()  # one read per round
        self.checked_length = length
        if True in met:
            self.stop_length = prefixes[met.index(True)]
        done = torch.full((input_ids.shape[0],), self.stop_length is not None, device=input_ids.device)
        if self.streamer is not None:
            cut_off = 0 if self.stop_length is None else length - self.stop_length
            held = 0 if self.streamer.held is None else self.streamer.held.shape[-1]
            self.streamer.release(None if not cut_off else max(held - cut_off, 0))
        return done


def check_every_token(arguments: dict) -> EveryTokenStops:
    """Swap the call's stopping criteria (and streamer) in `arguments` (an `_assisted_decoding` call's, bound by
    name) for per-token checks; -> the checker. (The hook calls it only where a criterion is not one of
    `CROPPED_BY_TRANSFORMERS`.)"""
    criteria = arguments["stopping_criteria"]
    streamer = arguments.get("streamer")
    held = HeldStreamer(streamer) if streamer is not None else None
    if held is not None:
        arguments["streamer"] = held
    checker = EveryTokenStops(criteria, arguments["input_ids"].shape[1], held)
    arguments["stopping_criteria"] = checker
    return checker


def cut(output, checker: EveryTokenStops, prompt_length: int):
    """`output` of the assisted loop (ids `[1, N]` or a GenerateDecoderOnlyOutput) ended at the checker's stop."""
    if checker.stop_length is None:
        return output
    stop = checker.stop_length
    if isinstance(output, torch.Tensor):
        return output[:, :stop]
    new_tokens = stop - prompt_length
    output.sequences = output.sequences[:, :stop]
    for name in ("scores", "logits", "attentions", "hidden_states"):
        per_token = getattr(output, name, None)
        if per_token is not None:  # one entry per new token
            setattr(output, name, per_token[:new_tokens])
    # The cache as plain decoding leaves it: every token's keys and values but the last one's (`crop` of a negative
    # number drops that many).
    cache = output_cache(output)
    if cache is not None and hasattr(cache, "crop") and cache.get_seq_length() > stop - 1:
        cache.crop(stop - 1 - cache.get_seq_length())
    return output
