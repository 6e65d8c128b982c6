"""A token-by-token exactness check for tests: every generated token against the target's float32 greedy choice."""

from __future__ import annotations

import torch

from hf_dynaspec.exactness import _float32_weights


@torch.no_grad()
def greedy_gaps(model, prompt_ids: torch.Tensor, generated_ids: torch.Tensor) -> torch.Tensor:
    """How far each generated token is from the target's float32 greedy choice on its own prefix: `[N]`,
    max logit minus the token's logit (0 where the token is the argmax).

    `check_exactness` stops at the first divergence; this checks every token of one output, including those
    after a near-tie, where the two outputs legitimately part. One forward over prompt + output.
    """
    device = next(model.parameters()).device
    generated_ids = generated_ids.flatten().to(device)
    sequence = torch.cat([prompt_ids.flatten().to(device), generated_ids])[None]
    with _float32_weights(model):
        logits = model(input_ids=sequence, use_cache=False).logits[0].float()
    rows = logits[prompt_ids.shape[-1] - 1 : -1]  # the row before each generated token predicts it
    return rows.max(dim=-1).values - rows.gather(-1, generated_ids[:, None]).squeeze(-1)
