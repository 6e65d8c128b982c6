"""Is an assisted output the same as plain greedy decoding, up to numerical near-ties?

Speculative decoding is exact in exact arithmetic. In bf16 a verification forward over several tokens rounds
differently from a one-token forward, so two candidates whose logits are almost tied can swap. The check
used by the tests, `hf-dynaspec generate` and the benchmark harness: at the first differing position,
recompute the target's float32 logits on the common prefix; the divergence is a near-tie when the two
tokens' logits differ by at most `tolerance` (1.0 by default).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch


@dataclass
class Divergence:
    position: int  # index among the generated tokens where the outputs first differ
    reference_token: int
    candidate_token: int
    margin: float | None  # |fp32 logit(reference) - fp32 logit(candidate)| on the common prefix
    near_tie: bool

    def as_dict(self) -> dict:
        return asdict(self)


def first_divergence(reference_ids: torch.Tensor, candidate_ids: torch.Tensor) -> int | None:
    """First index where two 1-D token sequences differ (a length difference counts), or None if equal."""
    reference_ids, candidate_ids = reference_ids.flatten().cpu(), candidate_ids.flatten().cpu()
    common = min(len(reference_ids), len(candidate_ids))
    differs = (reference_ids[:common] != candidate_ids[:common]).nonzero()
    if len(differs):
        return int(differs[0])
    return None if len(reference_ids) == len(candidate_ids) else common


@contextlib.contextmanager
def _float32_weights(model: torch.nn.Module):
    """Temporarily upcast `model`'s floating parameters and buffers to float32, then give each its own dtype back.

    Restoring tensor by tensor matters: a bf16 model keeps some buffers in float32 (rotary `inv_freq`), which a
    blanket `model.to(torch.bfloat16)` would round for good. Going up to float32 and back is exact for bf16/fp16
    values. The upcast needs twice the weights' memory while it lasts (on a GPU, check on a copy of the model if
    that does not fit)."""
    tensors = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    dtypes = [t.dtype for t in tensors]
    if all(dtype == torch.float32 for dtype in dtypes):
        yield model
        return
    for tensor in tensors:
        tensor.data = tensor.data.float()
    try:
        yield model
    finally:
        for tensor, dtype in zip(tensors, dtypes):
            tensor.data = tensor.data.to(dtype)


@torch.no_grad()
def check_exactness(
    model,
    prompt_ids: torch.Tensor,
    reference_ids: torch.Tensor,
    candidate_ids: torch.Tensor,
    tolerance: float = 1.0,
) -> Divergence | None:
    """Compare two generated continuations of `prompt_ids` `[1, T]`; None when token-identical.

    `reference_ids` / `candidate_ids` are the generated tokens only (1-D or `[1, N]`), e.g. plain vs assisted
    greedy output. When they differ and both have a token at the first differing position, the target's
    float32 logits on the common prefix give the margin; when one output merely stops earlier, there is no
    pair of tokens to compare and the divergence is not a near-tie.
    """
    reference_ids, candidate_ids = reference_ids.flatten(), candidate_ids.flatten()
    position = first_divergence(reference_ids, candidate_ids)
    if position is None:
        return None
    if position >= len(reference_ids) or position >= len(candidate_ids):
        return Divergence(position, -1, -1, None, False)
    ref_token, cand_token = int(reference_ids[position]), int(candidate_ids[position])
    device = next(model.parameters()).device  # the prompt may come from a tokenizer (CPU), the model be on a GPU
    prefix = torch.cat([prompt_ids.flatten().to(device), reference_ids[:position].to(device)])[None]
    with _float32_weights(model):
        logits = model(input_ids=prefix, use_cache=False, logits_to_keep=1).logits[0, -1].float()
    margin = abs(float(logits[ref_token] - logits[cand_token]))
    return Divergence(position, ref_token, cand_token, margin, margin <= tolerance)
