"""A diffusion LM as a lattice source: one forward over the context and K mask tokens gives per-position logits.

DiffuSpec drafts with a diffusion LM that shares the target's tokenizer (Dream-7B for Qwen2.5 targets): the
model reads the committed context followed by a block of K mask tokens, bidirectionally, and its logits at the
masked positions are the lattice (hf_dynaspec.drafting.lattice) that CPS searches or a tree is picked from.
`DiffusionDrafter` wraps any such model: a transformers model whose forward takes `input_ids` and returns
`.logits` `[1, L + K, V]`, attending over the whole block (a masked LM such as BERT, or a diffusion LM loaded
without remote code). One denoising step only: the lattice is the first step's marginals.

    drafter = DiffusionDrafter(diffusion_model, mask_token_id=tok.mask_token_id, block_size=8)
    out = target.generate(**inputs, custom_generate=speculative_generate, drafter=drafter, lattice_draft="cps")

Legend: L context, K block, V vocabulary.
"""

from __future__ import annotations

import torch

from hf_dynaspec.errors import AssistantMismatchError
from hf_dynaspec.stats import DraftStats, latest_stats


class DiffusionDrafter:
    """A masked-block model as a lattice source (see the module's doc). `max_context`: the last tokens it reads
    (None: all)."""

    source_name = "diffusion"

    def __init__(self, model, mask_token_id: int, block_size: int = 8, max_context: int | None = None):
        vocab = int(model.config.vocab_size)
        if not 0 <= mask_token_id < vocab:
            raise ValueError(f"mask_token_id {mask_token_id} is outside the diffusion model's vocabulary ({vocab})")
        if block_size < 1 or (max_context is not None and max_context < 1):
            raise ValueError(f"block_size and max_context must be >= 1; got {block_size}, {max_context}")
        self.model = model.eval()
        self.mask_token_id = mask_token_id
        self.num_positions = block_size
        self.max_context = max_context
        self.config = model.config
        self.target = None
        self._target_vocab = vocab

    @property
    def drafter(self) -> DiffusionDrafter:
        return self

    @property
    def stats(self) -> DraftStats:
        return latest_stats(self)

    def attach(self, target) -> DiffusionDrafter:
        """Check the two models share a vocabulary (ids must mean the same tokens)."""
        rows = target.get_output_embeddings().weight.shape[0]
        if self.config.vocab_size < rows:
            raise AssistantMismatchError(
                f"the diffusion model's vocabulary ({self.config.vocab_size}) is smaller than the target's ({rows}): "
                "a lattice source must share the target's tokenizer (DiffuSpec pairs Dream-7B with Qwen2.5 targets)")
        self.target, self._target_vocab = target, rows
        return self

    def hidden_state_selection(self) -> int:
        return -1  # the public loop asks the target for one hidden state; a diffusion drafter does not read it

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return hidden_states[-1]

    @torch.no_grad()
    def lattice_logits(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, depth: int,
                       shortlist: bool = False) -> tuple[torch.Tensor, None]:
        """Logits `[depth, V_target]` float32 at `depth` mask tokens after the context `input_ids` `[1, L]` (its
        last token the root); the target's hidden states are not read."""
        if shortlist:
            raise ValueError("a diffusion drafter scores its own head: shortlist=True applies to Medusa heads")
        context = input_ids[0] if self.max_context is None else input_ids[0, -self.max_context :]
        # The diffusion model may live on another card than the target (or on the CPU beside a GPU target): its
        # input goes to its device, its lattice comes back to the target's.
        device = self.model.get_input_embeddings().weight.device
        block = torch.full((depth,), self.mask_token_id, dtype=context.dtype, device=device)
        logits = self.model(input_ids=torch.cat([context.to(device), block])[None]).logits[0, -depth:]
        return logits[:, : self._target_vocab].float().to(input_ids.device), None
