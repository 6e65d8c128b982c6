"""`DynaSpecAssistant`: the artifact, and the drop-in `assistant_model` for `generate()`.

    model = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.bfloat16)
    assistant = DynaSpecAssistant.from_pretrained(assistant_path, target=model)
    out = model.generate(**inputs, assistant_model=assistant, max_new_tokens=256)
    assistant.stats.tau

It is a `PreTrainedModel` (save_pretrained / push_to_hub as usual, safetensors only) whose weights are only
the drafter's own; the target's embedding, final norm and LM head are borrowed at `attach(target)`. Its files:
config.json (`DynaSpecConfig`, what it is), model.safetensors, generation_config.json
(`DynaSpecGenerationConfig`, how it drafts by default), checksums.json, card.json and a README model card.
How it drafts at run time lives in hf_dynaspec.drafting and hf_dynaspec.generation, which this module never
imports: `import hf_dynaspec` installs the generate() route.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModel, PreTrainedModel

from hf_dynaspec.errors import AssistantMismatchError, require_model
from hf_dynaspec.modeling import checkpoints, hub, integrity, model_card
from hf_dynaspec.modeling.config import DynaSpecConfig, drafter_free_config, layer_fields
from hf_dynaspec.modeling.drafter import TargetParts, build_drafter, drafting_device, narrow_mlp
from hf_dynaspec.modeling.drafter_artifact import DrafterArtifact, read_generation_json
from hf_dynaspec.modeling.families import (
    drafter_rope_parameters,
    family_classes,
    family_layer_settings,
    warn_if_half_overflows,
)
from hf_dynaspec.modeling.options import (
    DRAFTER_FREE_OPTIONS,
    LEGACY_NAMES,
    OPTION_DEFAULTS,
    DynaSpecGenerationConfig,
    merge_legacy_options,
    normalise_option_names,
    split_legacy_options,
)
from hf_dynaspec.modeling.shortlist.artifact import VocabShortlists


class DynaSpecAssistant(DrafterArtifact):
    config_class = DynaSpecConfig
    base_model_prefix = "drafter"
    _supports_sdpa = True
    use_instead = ("model.generate(..., assistant_model=assistant), or model.generate(..., "
                   "custom_generate=hf_dynaspec.speculative_generate, drafter=assistant[, trees=True])")

    def __init__(self, config: DynaSpecConfig):
        super().__init__(config)
        self.drafter = build_drafter(config)
        # How it drafts by default (generation_config.json); generate() options override it per call.
        self.generation_config = DynaSpecGenerationConfig()
        self.shortlists = VocabShortlists(config)
        # Runtime option, never saved: keep every drafted token id in `stats` (to build a VocabTrim list).
        self.collect_draft_tokens = False
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    # -- creation ------------------------------------------------------------------------------------
    @classmethod
    def from_target(cls, target: PreTrainedModel, **overrides) -> DynaSpecAssistant:
        """A fresh, untrained assistant for `target` (EAGLE-1/2 drafter), attached to it.

        `overrides`: `DynaSpecConfig` fields (e.g. `drafter_kind="eagle3"`) and drafting options
        (`DynaSpecGenerationConfig` fields, e.g. `num_assistant_tokens=3`).

        The decoder layer is initialised from the target's last decoder layer and `fc` passes the target
        feature through, which is a starting point for training, not a useful drafter by itself.
        """
        options, config_overrides = _split_options(overrides)
        text = target.config.get_text_config()
        family_classes(text.model_type)  # clear error for families the drafter cannot mirror
        head_rows = target.get_output_embeddings().weight.shape[0]
        kwargs = dict(
            drafter_kind="eagle",
            layer_family=text.model_type,
            target_model_type=text.model_type,
            target_name_or_path=getattr(target.config, "_name_or_path", None) or None,
            target_revision=getattr(target.config, "_commit_hash", None),
            target_fingerprint=integrity.target_fingerprint(target),
            vocab_size=head_rows,
            target_hidden_size=text.hidden_size,
            **layer_fields(text.to_dict(), drafter_rope_parameters(text)),
            layer_config=family_layer_settings(text),
            fc_bias=False,
            use_target_norm=True,
        )
        if config_overrides.get("drafter_kind") == "eagle3":
            layers = text.num_hidden_layers
            # EAGLE-3's default: hidden states entering layers 2, L//2 and L-3 (clamped for tiny targets).
            kwargs["aux_hidden_state_layer_ids"] = [min(2, layers), layers // 2, max(layers - 3, 0)]
            kwargs["draft_vocab_size"] = min(32000, head_rows)
        kwargs.update(config_overrides)
        assistant = cls(DynaSpecConfig(**kwargs))
        assistant.generation_config = assistant.generation_config.with_options(**options)
        if assistant.config.drafter_kind == "eagle":
            assistant._init_from_last_layer(target)
            if assistant.config.fused_hidden_state_ids:  # post_init drew it at random: start as a pass-through
                assistant.drafter.add_feature_fusion()
        return assistant.attach(target)

    @classmethod
    def for_target(cls, target: PreTrainedModel, **options) -> DynaSpecAssistant:
        """A drafter-free assistant for any causal LM, no artifact: each round drafts a copy of the context (prompt
        lookup) or of earlier outputs (the suffix cache), or nothing, as this machine's measured costs and learnt
        acceptance say pays; on every route (`assistant_model=`, `speculative_generate`, `speculative_generate(trees=True)`, batches).
        `options`: drafting options, e.g. `prompt_lookup_num_tokens=0` / `suffix_cache_num_tokens=0` (a source off)."""
        require_model(target, "target (the model to serve)")
        config = drafter_free_config(target.config.get_text_config(), target.get_output_embeddings().weight.shape[0],
                                     target_name_or_path=getattr(target.config, "_name_or_path", None) or None,
                                     target_fingerprint=integrity.target_fingerprint(target))
        assistant = cls(config)
        assistant.generation_config = assistant.generation_config.with_options(**{**DRAFTER_FREE_OPTIONS, **options})
        return assistant.attach(target)

    @property
    def has_drafter(self) -> bool:
        """False for a drafter-free assistant (`for_target`), whose rounds draft by lookup only."""
        return self.config.drafter_kind != "none"

    @torch.no_grad()
    def _init_from_last_layer(self, target: PreTrainedModel) -> None:
        last = target.get_decoder().layers[-1].state_dict()
        own = self.drafter.layers[0].state_dict()
        if own["mlp.down_proj.weight"].shape[1] < last["mlp.down_proj.weight"].shape[1]:
            last = narrow_mlp(last, own["mlp.down_proj.weight"].shape[1])
        matching = {k: v for k, v in last.items() if k in own and own[k].shape == v.shape}
        self.drafter.layers[0].load_state_dict(matching, strict=False)
        hidden = self.config.hidden_size
        self.drafter.fc.weight.copy_(torch.cat([torch.zeros(hidden, hidden), torch.eye(hidden)], dim=1))

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *,
        target: PreTrainedModel | None = None,
        revision: str | None = None,
        dtype: torch.dtype | None = None,
        allow_different_target: bool = False,
        **kwargs,
    ) -> DynaSpecAssistant:
        """Load an assistant from a local directory or a Hub repo id: our format, EAGLE-1/2 or EAGLE-3.

        With `target`, the assistant is checked against it, cast to its dtype/device and attached. Keyword
        arguments named like a drafting option (`DynaSpecGenerationConfig`: `shortlist`, `num_assistant_tokens`,
        `tree_depth`, ...) override the artifact's generation_config.json for this object (config.json is never
        changed by loading); the others go to `huggingface_hub.snapshot_download`. Only JSON and safetensors files
        are read; pickled checkpoints are refused. The weights are checked against the artifact's
        `checksums.json` and for NaN/inf; `attach` refuses a target other than the one the assistant was made
        for (its embedding/LM-head fingerprint) unless `allow_different_target=True`. An artifact written by
        an early build of hf-dynaspec (drafting options inside config.json) loads with a FutureWarning.
        """
        # AutoModel.from_pretrained hands over the config it read; the artifact's own is read below, with its checks.
        kwargs.pop("config", None)
        options, hub_kwargs = _split_options(kwargs)
        directory = checkpoints.resolve_artifact_dir(pretrained_model_name_or_path, revision, **hub_kwargs)
        config_dict = checkpoints.read_config_dict(directory)
        integrity.verify_checksums(directory)
        state = checkpoints.read_state_dict(directory)
        layout = checkpoints.detect_layout(config_dict, set(state), directory / checkpoints.CONFIG_NAME)
        legacy_options = {}
        if layout == "dynaspec":
            config_dict, legacy_options = split_legacy_options(config_dict)
            config = DynaSpecConfig.from_dict(config_dict)
        else:
            num_layers = target.config.get_text_config().num_hidden_layers if target is not None else None
            config_kwargs = checkpoints.eagle_config_kwargs(config_dict, layout, num_layers)
            if target is not None:
                config_kwargs["target_model_type"] = target.config.get_text_config().model_type
            config_kwargs["target_name_or_path"] = config_dict.get("_name_or_path") or str(pretrained_model_name_or_path)
            state = checkpoints.eagle_state_dict(state, layout, config_kwargs)
            config = DynaSpecConfig(**config_kwargs)
        assistant = cls(config)
        # Drafting defaults: generation_config.json over the options an old config.json held; then the call's.
        stored = merge_legacy_options(legacy_options, read_generation_json(directory))
        assistant.generation_config = DynaSpecGenerationConfig(**stored).with_options(**options)
        assistant._load_checked(state, directory)
        assistant.card_data = model_card.read_card_data(directory)
        if dtype is not None:
            assistant.to(dtype)
        assistant.eval()
        return assistant.attach(target, allow_different_target) if target is not None else assistant

    # -- the target ------------------------------------------------------------------------------------
    def attach(self, target: PreTrainedModel, allow_different_target: bool = False) -> DynaSpecAssistant:
        """Check the assistant fits `target`, borrow its embedding/final norm/LM head, match dtype and device.

        `allow_different_target=True` accepts a target whose weights differ from those the assistant was made
        for (same shapes and family; a deliberate reuse, e.g. on another fine-tune): output stays exact, only
        acceptance may drop."""
        self._check_compatible(target, allow_different_target)
        warn_if_half_overflows(target)
        if not self.has_drafter:  # no weights to cast, nothing to borrow (any family: GPT-2 has no `norm`)
            self.__dict__["_target"] = target
            return self
        parts = TargetParts(embed_tokens=target.get_input_embeddings(), final_norm=target.get_decoder().norm,
                            lm_head=target.get_output_embeddings())
        device = drafting_device(parts)
        # Only the assistant's own weights follow (before the parts are borrowed, so that attaching never casts the
        # target's modules: some keep a norm in fp32). d2t/t2d are integer/bool buffers; `.to(dtype)` leaves them.
        self.drafter.target = None
        self.to(device=device, dtype=target.dtype)
        self.drafter.target = parts
        self.__dict__["_target"] = target
        return self

    def _apply(self, fn, recurse: bool = True):
        """`.to(...)`, `.half()`, `.cuda()` ... of an attached assistant also move the target parts its forward
        borrows (embedding, final norm, LM head: the target's own modules), so that everything a draft or
        training step reads follows; the rest of the target stays where it is. To move a whole model, move the
        target (`model.to(...)`): the assistant follows it at the next generate()."""
        super()._apply(fn, recurse)
        parts = self.drafter.target
        if parts is not None and recurse:
            for module in {id(m): m for m in (parts.embed_tokens, parts.final_norm, parts.lm_head)}.values():
                module._apply(fn)
        return self

    def _check_compatible(self, target: PreTrainedModel, allow_different_target: bool = False) -> None:
        require_model(target, "target (the model the assistant drafts for)")
        config, text, problems = self.config, target.config.get_text_config(), []
        head_rows = target.get_output_embeddings().weight.shape[0]
        if config.vocab_size != head_rows:
            problems.append(f"vocabulary {config.vocab_size} vs the target's {head_rows} LM-head rows")
        if config.target_hidden_size != text.hidden_size:
            problems.append(f"hidden size {config.target_hidden_size} vs the target's {text.hidden_size}")
        if config.target_model_type and config.target_model_type != text.model_type:
            problems.append(f"target family {config.target_model_type!r} vs {text.model_type!r}")
        for layer_ids in (config.aux_hidden_state_layer_ids, config.fused_hidden_state_ids):
            if layer_ids and max(layer_ids) > text.num_hidden_layers:
                problems.append(f"reads hidden_states{layer_ids} but the target has only {text.num_hidden_layers} layers")
        if not problems and config.target_fingerprint and not allow_different_target:
            mismatch = integrity.fingerprint_mismatch(config.target_fingerprint, target)
            if mismatch:
                raise AssistantMismatchError(
                    f"This assistant was trained for {config.target_name_or_path or 'another model'}, not for this "
                    f"target: the shapes match but {mismatch}. Load the assistant made for this model, or train one "
                    "(recipes/); to reuse it on purpose (output stays exact, acceptance may drop), pass "
                    "allow_different_target=True to from_pretrained or attach."
                )
        if problems:
            raise AssistantMismatchError(
                f"This assistant was built for another target ({config.target_name_or_path or 'unknown'}): "
                + "; ".join(problems)
                + ". Load or train an assistant for this target (DynaSpecAssistant.from_target(model) makes a "
                "fresh one)."
            )

    # -- changing the architecture ------------------------------------------------------------------
    def add_feature_fusion(self, fused_hidden_state_ids: list[int]) -> DynaSpecAssistant:
        """Make an eagle drafter fuse the target's `hidden_states[i]` for each given i with its last hidden state
        (see `DynaSpecConfig.fused_hidden_state_ids`). The new `fuse` passes the last hidden state through, so
        drafts are unchanged until the drafter is trained with fused features (recipes.train_drafter)."""
        if self.config.drafter_kind != "eagle":
            raise ValueError(f"feature fusion applies to eagle drafters, this one is {self.config.drafter_kind!r}")
        if self.config.fused_hidden_state_ids:
            raise ValueError(f"this drafter already fuses hidden_states{self.config.fused_hidden_state_ids}")
        self.config.fused_hidden_state_ids = list(fused_hidden_state_ids)
        try:
            self.config.validate_drafter()
            if self.target is not None:
                self._check_compatible(self.target)
        except Exception:
            self.config.fused_hidden_state_ids = None
            raise
        self.drafter.add_feature_fusion()
        weight = self.drafter.fc.weight
        self.drafter.fuse.to(device=weight.device, dtype=weight.dtype)
        if self.target is not None:  # re-check against the target; the next generate() routes `fuse` like the others
            self.attach(self.target)
        return self

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """The artifact's files (DrafterArtifact.save_pretrained). A drafter-free assistant (`for_target`) has
        nothing to save."""
        if not self.has_drafter:
            raise ValueError("a drafter-free assistant holds no weights: nothing to save; make it again with "
                             "DynaSpecAssistant.for_target(model, **options)")
        super().save_pretrained(save_directory, *args, **kwargs)

    def model_card(self) -> str:
        return model_card.render_model_card(self.config, self.generation_config, self.card_data)

    def push_to_hub(self, repo_id: str, **kwargs):
        """Upload the whole artifact (config, weights incl. clusters/router/frequency lists, card.json and the
        model card; never the target) to a Hub repo, with transformers' parameters (`commit_message`,
        `commit_description`, `private`, `token`, `revision`, `create_pr`, `max_shard_size`, `tags`) and
        `endpoint` (another Hub server; default $HF_ENDPOINT). See hf_dynaspec.modeling.hub."""
        return hub.push_artifact(self, repo_id, **kwargs)


def _split_options(kwargs: dict) -> tuple[dict, dict]:
    """Keyword arguments -> (drafting options, current names; the rest)."""
    option_names = set(OPTION_DEFAULTS) | set(LEGACY_NAMES)
    options = normalise_option_names({k: v for k, v in kwargs.items() if k in option_names})
    return options, {k: v for k, v in kwargs.items() if k not in option_names}


# transformers' Auto classes know the artifact: AutoConfig.from_pretrained(path) gives a DynaSpecConfig, and
# AutoModel.from_pretrained(path) a DynaSpecAssistant through its own from_pretrained (layouts, checks).
AutoConfig.register(DynaSpecConfig.model_type, DynaSpecConfig, exist_ok=True)
AutoModel.register(DynaSpecConfig, DynaSpecAssistant, exist_ok=True)
