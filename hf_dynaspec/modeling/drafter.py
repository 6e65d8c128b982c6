"""The EAGLE drafter: one decoder layer of the target's family fed with the target's own hidden states.

Two architectures, one subclass each of `Drafter` (`build_drafter(config)` picks by `config.drafter_kind`):

- `"eagle"` (EAGLE-1/2): `x = fc([E(token) ; f])` -> decoder layer without input norm -> `f_next`
  (the target's final norm applied when `use_target_norm`) -> the target's LM head. `f` is the target's
  last hidden state (post-norm) for verified positions, and the drafter's own `f_next` while drafting ahead.
- `"eagle3"` (EAGLE-3): `h = fc([h_low ; h_mid ; h_high])` once for target features, then a `midlayer`
  whose attention reads `[input_layernorm(E(token)) ; hidden_norm(h)]` (2H wide), its own `norm` and a
  reduced-vocabulary `lm_head` whose rows map to target ids through `d2t`.

An eagle drafter may also fuse several target layers into its feature (`config.fused_hidden_state_ids`):
`f = fuse([rms(h_i) ; ... ; h_last])` for verified positions (rms: parameter-free RMS normalisation), EAGLE-3's
multi-layer input kept in EAGLE-1/2's feature space (the drafter still regresses and feeds back post-norm
features and scores the target's head).

The state-dict keys are the published EAGLE layouts (`fc.*`, `layers.0.*` / `midlayer.*`, `norm.*`,
`lm_head.*`, `d2t`, `t2d`). Embedding, final norm and LM head of the target are borrowed, never stored.

Legend: B batch, T tokens, D target hidden, H drafter hidden, V target vocab, S shortlist (draft vocab).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from hf_dynaspec.modeling.config import DynaSpecConfig
from hf_dynaspec.modeling.families import DRAFTER_LAYER_TYPE, family_classes, layer_config_for


@dataclass
class TargetParts:
    """Modules borrowed from the target (never registered as submodules, so never saved)."""

    embed_tokens: nn.Module
    final_norm: nn.Module
    lm_head: nn.Module


def drafting_device(parts: TargetParts) -> torch.device:
    """The device a drafter runs on: that of the target parts it borrows, which must share one, since every
    draft step reads the embedding and the LM head (a device map may have put them apart, or offloaded them)."""
    devices = {}
    for name, module in (("embedding", parts.embed_tokens), ("final norm", parts.final_norm),
                         ("LM head", parts.lm_head)):
        weight = next(module.parameters(), None)
        if weight is not None:
            devices[name] = weight.device
    placement = ", ".join(f"{name} on {device}" for name, device in devices.items())
    if any(device.type == "meta" for device in devices.values()):
        raise ValueError(
            f"the target's {placement}: offloaded (meta) weights cannot be read by the drafter at every step. Load "
            "the target with its embedding, final norm and LM head on a GPU or the CPU (e.g. device_map={'': 0}, or "
            "a device_map that keeps model.embed_tokens, model.norm and lm_head off 'disk'/'meta')."
        )
    if len(set(devices.values())) > 1:
        raise ValueError(
            f"the target's {placement}: the drafter reads all three at every step, so they must share one device. "
            "Load the target with a device_map that puts model.embed_tokens, model.norm and lm_head on the same "
            "device (e.g. device_map={'': 0}, or a custom map with the decoder layers split across GPUs)."
        )
    return next(iter(devices.values()))


@functools.cache
def cache_argument(forward) -> str:
    """The name a forward (a layer's, a model's) takes its KV cache by: `cache` where the release documents it
    (transformers 5.24 renamed the argument and warns that `past_key_values` goes in 5.40), `past_key_values`
    before."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def output_cache(output):
    """A forward's or generate()'s KV cache, under `cache` or (before transformers 5.24) `past_key_values`; the old
    name is read only when the new one is absent, since reading it warns."""
    cache = output.get("cache")
    return cache if cache is not None else output.get("past_key_values")


def causal_mask(num_new: int, past_length: int, device: torch.device) -> torch.Tensor | None:
    """Boolean mask `[1, 1, num_new, past_length + num_new]`: new position i sees keys <= past_length + i.

    None for a single new position (it sees everything), which lets SDPA take its fastest path.
    """
    if num_new == 1:
        return None
    key_pos = torch.arange(past_length + num_new, device=device)
    query_pos = torch.arange(past_length, past_length + num_new, device=device)
    return (key_pos[None, :] <= query_pos[:, None])[None, None]


class Drafter(nn.Module):
    """What drafting sessions rely on, whatever the architecture (each subclass defines the first three):

    - `hidden_state_selection()` (the target forward's `output_hidden_states`: indices of hidden_states) and
      `select_target_hidden(hidden_states)`: which of the target's hidden states the drafter reads, and how they
      become its features `[B, T, F]`;
    - `fuse_target_hidden(features)` -> `[B, T, H]`; `step(token_embeds [B, T, D], hidden [B, T, H], position_ids,
      cache, attention_mask)` -> the next hidden `[B, T, H]` of each pair (embedding of token t+1, hidden of
      position t), the T new keys/values appended to `cache` (`attention_mask`: `causal_mask(T, cache length)`);
      `embed(token_ids)`;
    - `has_own_head`: False when the drafter scores the target's LM head (through a runtime shortlist head),
      True when it has its own reduced-vocabulary head (`draft_vocab_logits`, `draft_to_target_ids`).
    """

    has_own_head = False

    def __init__(self, config: DynaSpecConfig):
        super().__init__()
        self.config = config
        classes = family_classes(config.layer_family)
        self.rotary_emb = classes.named("RotaryEmbedding")(config=layer_config_for(config))
        self._rotary_kwargs = {"layer_type": DRAFTER_LAYER_TYPE} if classes.rotary_per_layer_type else {}
        # The rotary tables (inv_freq) as built, fp32: kept out of the module's buffers' casts (`_apply`), as
        # transformers keeps the target's own in fp32 under a bf16/fp16 load; a bf16 inv_freq shifts the drafter's
        # positions away from the target's at long contexts.
        self._rotary_fp32 = {name: buffer.detach().float().clone()
                             for name, buffer in self.rotary_emb.named_buffers(recurse=False)
                             if buffer.is_floating_point()}
        self.target: TargetParts | None = None

    def _apply(self, fn, recurse: bool = True):
        super()._apply(fn, recurse)
        for name, table in self._rotary_fp32.items():  # `.to(dtype)` never rounds them below fp32 (fp64 stays)
            current = getattr(self.rotary_emb, name)
            if current.dtype in (torch.float16, torch.bfloat16):
                setattr(self.rotary_emb, name, table.to(current.device))
        return self

    def rotary(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) for `position_ids` `[B, T]`, from the drafter layer's rotary table."""
        return self.rotary_emb(hidden, position_ids, **self._rotary_kwargs)

    def new_decoder_layer(self) -> nn.Module:
        """A decoder layer of the configured family (the drafter's one layer, before its EAGLE changes)."""
        return family_classes(self.config.layer_family).named("DecoderLayer")(layer_config_for(self.config), layer_idx=0)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.target.embed_tokens(token_ids)


class EagleDrafter(Drafter):
    """EAGLE-1/2: `fc([E(token) ; f])` -> one decoder layer without input norm -> the target's final norm and head.
    Optionally fuses several target layers into `f` (`config.fused_hidden_state_ids`)."""

    def __init__(self, config: DynaSpecConfig):
        super().__init__(config)
        if config.hidden_size != config.target_hidden_size:
            raise ValueError(
                "An eagle drafter feeds its output back as a target feature, so hidden_size "
                f"({config.hidden_size}) must equal target_hidden_size ({config.target_hidden_size})."
            )
        hidden = config.hidden_size
        layer = self.new_decoder_layer()
        self.fc = nn.Linear(2 * hidden, hidden, bias=config.fc_bias)
        # Inputs are already normalised features: EAGLE-1/2 drop the layer's input norm.
        layer.input_layernorm = nn.Identity()
        self.layers = nn.ModuleList([layer])
        self._cache_keyword = cache_argument(type(layer).forward)  # asked once: a traced step never inspects
        if config.fused_hidden_state_ids:
            self.add_feature_fusion()

    @torch.no_grad()
    def add_feature_fusion(self) -> None:
        """Create `fuse` for `config.fused_hidden_state_ids` as a pass-through of the last hidden state, so that
        fusion added to a trained drafter leaves its drafts unchanged until training moves it."""
        dim = self.config.target_hidden_size
        num_extra = len(self.config.fused_hidden_state_ids)
        self.fuse = nn.Linear((num_extra + 1) * dim, dim, bias=False)
        self.fuse.weight.copy_(torch.cat([torch.zeros(dim, num_extra * dim), torch.eye(dim)], dim=1))

    def hidden_state_selection(self) -> int | list[int]:
        if self.config.fused_hidden_state_ids:
            return list(self.config.fused_hidden_state_ids) + [-1]
        return -1

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """`[B, T, D]`, or `[B, T, (n+1)D]` with n fused layers (the last hidden state last)."""
        fused = self.config.fused_hidden_state_ids
        if fused:  # with a device map, earlier layers may sit on other devices than the last (no-op otherwise)
            last = hidden_states[-1]
            return torch.cat([hidden_states[i].to(last.device) for i in fused] + [last], dim=-1)
        return hidden_states[-1]

    def fuse_target_hidden(self, target_hidden: torch.Tensor) -> torch.Tensor:
        if self.config.fused_hidden_state_ids:
            # The fused states come from inside the residual stream, unnormalised: their scale differs by
            # layer by orders of magnitude (and a few channels carry huge activations), so each is
            # RMS-normalised first. The last hidden state is post-norm already.
            dim = self.config.target_hidden_size
            *inner, last = target_hidden.split(dim, dim=-1)
            inner = [F.rms_norm(h.float(), (dim,), eps=self.config.rms_norm_eps).to(h.dtype) for h in inner]
            return self.fuse(torch.cat(inner + [last], dim=-1))
        return target_hidden

    def step(self, token_embeds, hidden, position_ids, cache, attention_mask):
        position_embeddings = self.rotary(hidden, position_ids)
        fused = self.fc(torch.cat([token_embeds, hidden], dim=-1))
        out = self.layers[0](
            fused,
            attention_mask=attention_mask,
            position_ids=position_ids,
            position_embeddings=position_embeddings,
            **{self._cache_keyword: cache},
        )
        out = out[0] if isinstance(out, tuple) else out
        return self.target.final_norm(out) if self.config.use_target_norm else out


class Eagle3Drafter(Drafter):
    """EAGLE-3: `fc` over three target layers once, a `midlayer` reading `[norm(E(token)) ; norm(h)]`, its own norm
    and reduced-vocabulary head whose rows map to target ids through `d2t`."""

    has_own_head = True

    def __init__(self, config: DynaSpecConfig):
        super().__init__(config)
        hidden = config.hidden_size
        layer = self.new_decoder_layer()
        self.fc = nn.Linear(3 * config.target_hidden_size, hidden, bias=config.fc_bias)
        attention = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(attention, name)
            setattr(attention, name, nn.Linear(2 * hidden, old.out_features, bias=old.bias is not None))
        rms_norm = family_classes(config.layer_family).named("RMSNorm")
        layer.hidden_norm = rms_norm(hidden, eps=config.rms_norm_eps)
        self.midlayer = layer
        self._cache_keyword = cache_argument(type(layer.self_attn).forward)
        self.norm = rms_norm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))

    def hidden_state_selection(self) -> list[int]:
        return list(self.config.aux_hidden_state_layer_ids)

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """`[B, T, 3D]`: the three aux hidden states side by side."""
        device = self.fc.weight.device  # with a device map the three layers may sit on different devices
        return torch.cat([hidden_states[i].to(device) for i in self.config.aux_hidden_state_layer_ids], dim=-1)

    def fuse_target_hidden(self, target_hidden: torch.Tensor) -> torch.Tensor:
        return self.fc(target_hidden)

    def step(self, token_embeds, hidden, position_ids, cache, attention_mask):
        position_embeddings = self.rotary(hidden, position_ids)
        layer = self.midlayer
        attn_in = torch.cat([layer.input_layernorm(token_embeds), layer.hidden_norm(hidden)], dim=-1)
        attn_out, _ = layer.self_attn(
            hidden_states=attn_in,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            **{self._cache_keyword: cache},
        )
        hidden = hidden + attn_out
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def draft_vocab_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Its own head: hidden `[B, T, H]` -> logits `[B, T, S]` over the draft vocabulary (rows map to target
        ids through `draft_to_target_ids`)."""
        return self.lm_head(self.norm(hidden))

    def draft_to_target_ids(self) -> torch.Tensor:
        """Target id of each draft-vocabulary row, `[S]`."""
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t


def narrow_mlp(layer_state: dict[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """A decoder layer's state dict with its gated MLP cut to the `width` intermediate channels that matter most.

    Channel i contributes down_proj[:, i] * act(gate_proj[i] . x) * (up_proj[i] . x); the product of the three
    vectors' norms bounds that for a unit-norm x, so those with the largest product are kept (in their original
    order). It lets a drafter narrower than the target's last layer (a smaller artifact, e.g. for a 1.5B target)
    still start from that layer rather than from random weights.
    """
    gate, up, down = (layer_state[f"mlp.{name}.weight"] for name in ("gate_proj", "up_proj", "down_proj"))
    score = gate.float().norm(dim=1) * up.float().norm(dim=1) * down.float().norm(dim=0)
    keep = score.topk(width).indices.sort().values
    narrowed = dict(layer_state)
    narrowed["mlp.gate_proj.weight"] = gate[keep]
    narrowed["mlp.up_proj.weight"] = up[keep]
    narrowed["mlp.down_proj.weight"] = down[:, keep]
    return narrowed


class NoDrafter(nn.Module):
    """`"none"`: the drafter of a drafter-free assistant (`DynaSpecAssistant.for_target`), whose rounds draft by
    prompt lookup and the suffix cache only. It reads none of the target's hidden states and has no weights."""

    has_own_head = True  # no shortlist head to build

    def __init__(self, config: DynaSpecConfig):
        super().__init__()
        self.config = config
        self.target = None

    def hidden_state_selection(self) -> None:
        return None

    def select_target_hidden(self, hidden_states) -> None:
        return None


DRAFTER_CLASSES = {"eagle": EagleDrafter, "eagle3": Eagle3Drafter, "none": NoDrafter}


def build_drafter(config: DynaSpecConfig) -> Drafter | NoDrafter:
    """The drafter module `config.drafter_kind` names."""
    return DRAFTER_CLASSES[config.drafter_kind](config)
