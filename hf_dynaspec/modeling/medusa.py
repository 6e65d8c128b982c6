"""Medusa heads (arXiv 2401.10774) as an assistant: K light heads on the target's last hidden state.

Head k (0-based) reads the target's post-norm last hidden state h_t at the last verified position and guesses the
token k + 2 steps ahead (the target's own LM head guesses step 1): `g_k = R_k(h_t)` with `R_k` one or more
residual blocks `x + SiLU(W x + b)` (W initialised to zero, so an untrained head repeats the LM head), then a
vocabulary projection. By default every head scores the target's own LM head (vLLM's `original_lm_head`), so the
artifact holds only the residual blocks (K x L x (D^2 + D) parameters); `own_heads=True` keeps a projection per
head, which is what public checkpoints carry. No sequential drafter step: drafting is K blocks and K projections
on one row, from the pass the target runs anyway.

Shortlisted heads (`frequency_ids`, an FR-Spec list of the most frequent target ids stored with the heads): each
head scores only those rows of its projection, a fraction S/V of the cost; verification keeps the whole vocabulary.

The state-dict keys are vLLM's Medusa layout (`blocks.{k}.layers.{j}.weight|bias`, `lm_heads.{k}.weight`);
hf_dynaspec.modeling.medusa_layouts reads FasterDecoding's and vLLM's published files into them.

Legend: K heads, L residual blocks per head, N rows, D target hidden, V target vocab, S shortlist.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PretrainedConfig, PreTrainedModel

from hf_dynaspec.errors import AssistantMismatchError
from hf_dynaspec.modeling import checkpoints, integrity, model_card
from hf_dynaspec.modeling.acceptance_prior import priors_from_config
from hf_dynaspec.modeling.drafter_artifact import DrafterArtifact, read_generation_json
from hf_dynaspec.modeling.families import warn_if_half_overflows
from hf_dynaspec.modeling.medusa_layouts import OWN_MODEL_TYPE, read_medusa
from hf_dynaspec.modeling.medusa_options import OPTION_DEFAULTS, MedusaGenerationConfig
from hf_dynaspec.runtime_store import runtime_of
from hf_dynaspec.version import __version__


class MedusaConfig(PretrainedConfig):
    """Configuration of a `MedusaAssistant` (`drafter_kind="medusa"`).

    Args:
        num_heads: K, heads guessing tokens 2..K+1 steps ahead.
        num_layers: L, residual blocks per head.
        hidden_size: D, the target's hidden size (the heads' width).
        vocab_size: V, the target's LM-head rows.
        own_heads: a vocabulary projection per head (`lm_heads.{k}`), else the target's LM head.
        block_bias: the residual blocks' linears have a bias (FasterDecoding's do; vLLM's `medusa_fc_bias`).
        head_vocab_size: rows of an own head truncated to a token map (vLLM's `truncated_vocab_size`), else V.
        frequency_list_size: S, the FR-Spec shortlist stored with the heads (0: none).
        expected_acceptance: the heads' acceptance measured with their target, by decoding mode, where the
            `draft_plan="auto"` planner's tables start (hf_dynaspec.modeling.acceptance_prior); None: 0.5.
    """

    model_type = OWN_MODEL_TYPE

    def __init__(self, num_heads: int = 4, num_layers: int = 1, hidden_size: int = 4096, vocab_size: int = 32000,
                 own_heads: bool = False, block_bias: bool = True, head_vocab_size: int | None = None,
                 frequency_list_size: int = 0, target_model_type: str | None = None,
                 target_name_or_path: str | None = None, library_version: str | None = None,
                 expected_acceptance: dict | None = None, **kwargs):
        self.drafter_kind = "medusa"
        self.num_heads, self.num_layers, self.hidden_size, self.vocab_size = num_heads, num_layers, hidden_size, vocab_size
        self.own_heads, self.block_bias, self.frequency_list_size = own_heads, block_bias, frequency_list_size
        self.head_vocab_size = head_vocab_size if head_vocab_size is not None else vocab_size
        self.target_model_type, self.target_name_or_path = target_model_type, target_name_or_path
        self.library_version = library_version or __version__
        priors_from_config(expected_acceptance)  # raises naming the fault
        self.expected_acceptance = expected_acceptance
        kwargs.pop("drafter_kind", None)
        super().__init__(**kwargs)
        for name in ("num_heads", "num_layers", "hidden_size", "vocab_size", "head_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MedusaConfig.{name} must be a positive integer, got {value!r}.")
        if self.head_vocab_size > self.vocab_size:
            raise ValueError(f"MedusaConfig.head_vocab_size ({self.head_vocab_size}) exceeds vocab_size ({vocab_size}).")
        if self.head_vocab_size < self.vocab_size and not self.own_heads:
            raise ValueError("a truncated head vocabulary (head_vocab_size < vocab_size) needs own_heads=True")


class ResidualBlocks(nn.Module):
    """One head's L blocks `x + SiLU(W_j x + b_j)`, applied in turn."""

    def __init__(self, hidden_size: int, num_layers: int, bias: bool):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=bias) for _ in range(num_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + F.silu(layer(x))
        return x


class MedusaAssistant(DrafterArtifact):
    """Medusa heads for one target. `model.generate(**inputs, custom_generate=speculative_generate, drafter=heads)`."""

    config_class = MedusaConfig
    base_model_prefix = "medusa"
    use_instead = "model.generate(**inputs, custom_generate=speculative_generate, drafter=heads)"

    def __init__(self, config: MedusaConfig):
        super().__init__(config)
        size, layers, bias = config.hidden_size, config.num_layers, config.block_bias
        self.blocks = nn.ModuleList(ResidualBlocks(size, layers, bias) for _ in range(config.num_heads))
        rows = config.head_vocab_size
        self.lm_heads = (nn.ModuleList(nn.Linear(size, rows, bias=False) for _ in range(config.num_heads))
                         if config.own_heads else None)
        # Target id of each own-head row when truncated (vLLM's token_map); empty when rows are the target's ids.
        self.register_buffer("head_token_ids", torch.arange(rows) if rows < config.vocab_size
                             else torch.zeros(0, dtype=torch.long))
        self.register_buffer("frequency_ids", torch.zeros(config.frequency_list_size, dtype=torch.long))
        self.post_init()
        # How they draft by default (generation_config.json); speculative_generate's keyword arguments override it.
        self.generation_config = MedusaGenerationConfig()

    def _init_weights(self, module: nn.Module) -> None:
        """Blocks start as the identity (W = 0, b = 0): an untrained head repeats the LM head's guess."""
        if isinstance(module, ResidualBlocks):
            for layer in module.layers:
                nn.init.zeros_(layer.weight)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)

    # -- building and loading ------------------------------------------------------------------------
    @classmethod
    def from_target(cls, target: PreTrainedModel, num_heads: int = 4, num_layers: int = 1,
                    own_heads: bool = False) -> MedusaAssistant:
        """Untrained heads for `target` (own heads start as copies of its LM head), attached."""
        head = target.get_output_embeddings()
        config = MedusaConfig(num_heads=num_heads, num_layers=num_layers, hidden_size=head.weight.shape[1],
                              vocab_size=head.weight.shape[0], own_heads=own_heads,
                              target_model_type=target.config.model_type,
                              target_name_or_path=getattr(target.config, "_name_or_path", None))
        heads = cls(config)
        if own_heads:
            with torch.no_grad():
                for projection in heads.lm_heads:
                    projection.weight.copy_(head.weight.float())
        return heads.attach(target)

    @classmethod
    def from_pretrained(cls, path_or_repo_id: str | os.PathLike, *, target: PreTrainedModel | None = None,
                        revision: str | None = None, **kwargs) -> MedusaAssistant:
        """Heads saved here, or a published Medusa checkpoint as it is (FasterDecoding's `medusa_lm_head` files,
        vLLM's layout); attached to `target` when given. Weights load through safetensors, or `.pt`/`.bin`
        through `torch.load(weights_only=True)`; every key must be known, every shape right, every value finite and
        the files those checksums.json lists (heads saved here) unchanged. Keyword
        arguments named like a drafting option (`MedusaGenerationConfig`: `draft_plan="auto"`,
        `tree_total_tokens=16`, ...) override the heads' generation_config.json; the rest go to the Hub download."""
        options = {name: kwargs.pop(name) for name in list(kwargs) if name in OPTION_DEFAULTS}
        directory = checkpoints.resolve_artifact_dir(path_or_repo_id, revision=revision, **kwargs)
        integrity.verify_checksums(directory)
        fields, state = read_medusa(Path(directory))
        heads = cls(MedusaConfig.from_dict(fields))
        heads._load_checked(state, directory)
        heads.card_data = model_card.read_card_data(Path(directory))
        # Their drafting options: generation_config.json when saved by hf-dynaspec (published heads have none of ours:
        # the defaults), the call's `options` over it.
        stored = {k: v for k, v in (read_generation_json(Path(directory)) or {}).items() if k in OPTION_DEFAULTS}
        heads.generation_config = MedusaGenerationConfig(**{**stored, **options})
        return heads.attach(target) if target is not None else heads

    def model_card(self) -> str:
        return model_card.render_medusa_card(self.config, self.card_data)

    # -- the target ----------------------------------------------------------------------------------
    @property
    def drafter(self) -> MedusaAssistant:
        """What the public loop asks for the target's hidden states: the heads themselves."""
        return self

    def attach(self, target: PreTrainedModel) -> MedusaAssistant:
        """Check the heads fit `target`, borrow its LM head and follow its dtype and device."""
        head = target.get_output_embeddings()
        rows, width = head.weight.shape
        if (rows, width) != (self.config.vocab_size, self.config.hidden_size):
            raise AssistantMismatchError(
                f"these Medusa heads were made for a target with vocabulary {self.config.vocab_size} and hidden size "
                f"{self.config.hidden_size} ({self.config.target_name_or_path or 'unknown'}); this target has "
                f"{rows} and {width}. Load the heads made for this model, or train them (recipes/train_medusa.py).")
        warn_if_half_overflows(target)
        self.to(device=head.weight.device, dtype=target.dtype)
        self.__dict__["_target"] = target
        runtime_of(self).shortlist_rows = None  # gathered again from this target's head when next needed
        return self

    def hidden_state_selection(self) -> int:
        return -1

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The target's post-norm last hidden state `[B, T, D]`, what Medusa heads read."""
        return hidden_states[-1]

    # -- scoring -------------------------------------------------------------------------------------
    source_name = "medusa"  # what the statistics call its rounds

    @property
    def num_positions(self) -> int:
        """Lattice positions the heads draft (K)."""
        return self.config.num_heads

    def lattice_logits(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, depth: int,
                       shortlist: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The lattice of the first `depth` heads from the target's newest hidden state (`target_hidden[0, -1]`):
        (logits `[depth, R]` float32, target ids of the columns or None); `input_ids` is not read."""
        logits, ids = self.head_logits(target_hidden[0, -1:], shortlist=shortlist)
        return logits[:depth, 0], ids

    def head_logits(self, hidden: torch.Tensor, shortlist: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`[N, D]` -> (logits `[K, N, R]` float32, target ids of the R columns `[R]`, None when R = V in order).

        `shortlist`: score only the stored FR-Spec list (`frequency_ids`) of each head's projection."""
        states = torch.stack([block(hidden) for block in self.blocks])  # [K, N, D]: each head's state
        if shortlist:
            if not self.frequency_ids.numel():
                raise ValueError("these Medusa heads store no shortlist: build one with recipes/train_medusa.py "
                                 "--frequency-list-size S, or draft with shortlist=False")
            return self._shortlisted_logits(states), self.frequency_ids
        if self.lm_heads is None:
            # One product for all K heads: the shared head's weight (V x D, the largest matrix of a small target)
            # is read once per round, not K times.
            logits = self.target.get_output_embeddings()(states)
        else:
            logits = torch.stack([projection(state) for projection, state in zip(self.lm_heads, states)])
        ids = self.head_token_ids if self.head_token_ids.numel() else None
        return logits.float(), ids

    def _shortlisted_logits(self, states: torch.Tensor) -> torch.Tensor:
        """Each head's logits over the shortlist `[K, N, S]`: the projection's S rows, gathered once per attach
        (kept in the heads' run-time state, hf_dynaspec.runtime_store)."""
        runtime = runtime_of(self)
        rows = runtime.shortlist_rows
        if rows is None or rows.device != states.device or rows.dtype != states.dtype:
            if self.lm_heads is None:
                weights = self.target.get_output_embeddings().weight[self.frequency_ids][None]
            else:
                if self.head_token_ids.numel():
                    raise ValueError("a shortlist over truncated own heads is not supported: use their token map")
                weights = torch.stack([projection.weight[self.frequency_ids] for projection in self.lm_heads])
            rows = runtime.shortlist_rows = weights.to(states.dtype).contiguous()  # [1 or K, S, D]
        if rows.shape[0] == 1:  # the target's head: one [K*N, D] x [D, S] product, its S rows read once
            return (states.reshape(-1, states.shape[-1]) @ rows[0].T).reshape(*states.shape[:2], -1).float()
        return torch.matmul(states, rows.transpose(1, 2)).float()
