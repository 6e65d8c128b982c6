"""Sampled answers at a checkpoint's published settings, drawn from the few tokens its top-k keeps.

transformers' top-p sorts every row's whole vocabulary and its draw (`torch.multinomial`) walks it: at a batch of 64
on a 262k vocabulary (Gemma 3) that is most of a sampled step. `KeptDraw` runs the top-k, the top-p and the draw
on the top-k's entries only and hands generate() a row whose one finite score is the drawn token, so that greedy
selection takes it: `generate(do_sample=False, logits_processor=[temperature, KeptDraw])` samples as
`generate(do_sample=True, temperature=..., top_k=..., top_p=...)` does.

The same law: the top-k keeps every entry equal to its k-th value, as transformers' does; the top-p removes the
entries whose ascending cumulative probability is <= 1 - top_p, keeping the most likely one, as transformers' does;
the draw is the package's exponential race over the kept tokens, handed the Exp(1) draws in the order
`hf_dynaspec.sampling.sample` hands them (row-major, token ids ascending), so that from one seed it draws what
generate()'s own sampling draws when its `torch.multinomial` is the package's race (tests/test_recipes.py). Where
the top-p's cut falls between equal scores, which of them transformers keeps is its sort's choice (`torch.sort`
without `stable=True`: no order among equals is promised); here it is topk's: the same number of them, the same
mass, possibly other tokens of the same score.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper

import hf_dynaspec.sampling as sampling

SPARSE_SETTINGS = ("temperature", "top_k", "top_p", "repetition_penalty")
TIES_SEEN = 16  # entries past the k-th read with it, to see ties with it
OTHER_WARPERS = {"min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None}  # (off)


class KeptDraw(LogitsProcessor):
    """transformers' top-k and top-p, then one draw, over the top-k's entries of each row (`[B, V]` scores on the
    CPU) -> scores of -inf but at each row's drawn token (0). Legend: B rows, V vocabulary, M entries kept."""

    def __init__(self, top_k: int, top_p: float = 1.0):
        self.top_k, self.top_p = top_k, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ids, probs = self.kept(scores)
        order = ids.argsort(dim=-1)  # token ids ascending within each row: the order sample() races them in
        ids, probs = ids.gather(1, order), probs.gather(1, order)
        rows, columns = probs.nonzero(as_tuple=True)
        column = sampling.race_among(probs[rows, columns], rows, columns, probs.shape)
        token = ids.gather(1, column[:, None])
        return torch.full_like(scores, float("-inf")).scatter_(1, token, 0.0)

    def kept(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's kept token ids `[B, M]` and their probabilities after the top-k and top-p (0 where removed)."""
        k = min(self.top_k, scores.shape[-1])
        # Entries equal to the k-th value stay, as in transformers' top-k. A few entries past the k-th show them
        # (bf16 logits tie often); only where they are all tied too is the whole row counted (a full pass).
        values, ids = scores.topk(min(k + TIES_SEEN, scores.shape[-1]), dim=-1)  # descending
        kth = values[:, k - 1 : k]
        if values.shape[-1] > k and bool((values[:, -1:] == kth).any()):
            values, ids = scores.topk(int((scores >= kth).sum(dim=-1).max()), dim=-1)
        values = values.masked_fill(values < kth, float("-inf"))
        if self.top_p < 1.0:
            ascending = values.flip(-1)  # transformers' top-p reads the row sorted ascending
            remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - self.top_p
            remove[:, -1] = False  # min_tokens_to_keep = 1: the most likely token stays
            values = ascending.masked_fill(remove, float("-inf")).flip(-1)
        return ids, values.float().softmax(dim=-1)


def sparse_sampling(sampling_arguments: dict, defaults=None) -> dict:
    """generate()'s keyword arguments drawing what `sampling_arguments` (generate()'s sampling arguments, over
    `defaults`: the model's generation config, as transformers reads it) draws, through `KeptDraw`. Without a top-k
    (which transformers would fill with its own default) or with other warpers: the arguments unchanged."""
    value = {name: sampling_arguments.get(name, getattr(defaults, name, None)) for name in SPARSE_SETTINGS}
    others = any(getattr(defaults, name, off) not in (off, None) for name, off in OTHER_WARPERS.items())
    if (not sampling_arguments.get("do_sample") or set(sampling_arguments) - {"do_sample", *SPARSE_SETTINGS}
            or not value["top_k"] or others):
        return sampling_arguments
    processors = LogitsProcessorList()
    if value["temperature"] not in (None, 1.0):
        processors.append(TemperatureLogitsWarper(value["temperature"]))
    processors.append(KeptDraw(value["top_k"], value["top_p"] if value["top_p"] is not None else 1.0))
    # transformers puts given processors after its own (the repetition penalty), where its warpers would be.
    return {"do_sample": False, "repetition_penalty": value["repetition_penalty"], "logits_processor": processors}
