"""`DynaSpecAssistant`: the drop-in `assistant_model` for `generate()`.

    model = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.bfloat16)
    assistant = DynaSpecAssistant.from_pretrained(assistant_path, target=model)
    out = model.generate(**inputs, assistant_model=assistant, max_new_tokens=256)
    assistant.stats.tau

It is a `PreTrainedModel` (save_pretrained / push_to_hub as usual, safetensors only) whose weights are only
the drafter's own; the target's embedding, final norm and LM head are borrowed at `attach(target)`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn as nn
from transformers import PreTrainedModel

from hf_dynaspec import checkpoints, cpu_verify, hf_integration, integrity, model_card
from hf_dynaspec.config import DynaSpecConfig
from hf_dynaspec.drafter import EagleDrafter, TargetParts
from hf_dynaspec.drafting import ChainDraftSession
from hf_dynaspec.kernels import cpu_rows
from hf_dynaspec.families import family_classes
from hf_dynaspec.generation_checks import check_chain_inputs
from hf_dynaspec.shortlist.artifact import VocabShortlists
from hf_dynaspec.shortlist.selector import build_head
from hf_dynaspec.stats import DraftStats


class AssistantMismatchError(ValueError):
    """The assistant was built for a different target."""


class DynaSpecAssistant(PreTrainedModel):
    config_class = DynaSpecConfig
    base_model_prefix = "drafter"
    main_input_name = "input_ids"
    _supports_sdpa = True

    def __init__(self, config: DynaSpecConfig):
        super().__init__(config)
        self.drafter = EagleDrafter(config)
        self.shortlists = VocabShortlists(config)
        self.stats = DraftStats()
        # Runtime option, never saved: keep every drafted token id in `stats` (to build a VocabTrim list).
        self.collect_draft_tokens = False
        # How the artifact was made and what it measured (card.json): the model card is rendered from it.
        self.card_data: dict = {}
        # Plain attribute (not a submodule): the target is never saved nor moved with the assistant.
        self.__dict__["_target"] = None
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    # -- creation ------------------------------------------------------------------------------------
    @classmethod
    def from_target(cls, target: PreTrainedModel, **config_overrides) -> "DynaSpecAssistant":
        """A fresh, untrained assistant for `target` (EAGLE-1/2 drafter), attached to it.

        The decoder layer is initialised from the target's last decoder layer and `fc` passes the target
        feature through, which is a starting point for training, not a useful drafter by itself.
        """
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
            hidden_size=text.hidden_size,
            intermediate_size=text.intermediate_size,
            num_attention_heads=text.num_attention_heads,
            num_key_value_heads=getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
            head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
            rms_norm_eps=text.rms_norm_eps,
            rope_parameters=dict(text.rope_parameters),
            max_position_embeddings=text.max_position_embeddings,
            hidden_act=text.hidden_act,
            attention_bias=bool(getattr(text, "attention_bias", False)),
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
        if assistant.config.drafter_kind == "eagle":
            assistant._init_from_last_layer(target)
            if assistant.config.fused_hidden_state_ids:  # post_init drew it at random: start as a pass-through
                assistant.drafter.add_feature_fusion()
        return assistant.attach(target)

    @torch.no_grad()
    def _init_from_last_layer(self, target: PreTrainedModel) -> None:
        last = target.get_decoder().layers[-1].state_dict()
        own = self.drafter.layers[0].state_dict()
        if own["mlp.down_proj.weight"].shape[1] < last["mlp.down_proj.weight"].shape[1]:
            last = narrow_mlp(last, own["mlp.down_proj.weight"].shape[1])
        matching = {k: v for k, v in last.items() if k in own and own[k].shape == v.shape}
        self.drafter.layers[0].load_state_dict(matching, strict=False)
        hidden = self.config.hidden_size
        weight = torch.zeros(hidden, 2 * hidden)
        weight[:, hidden:] = torch.eye(hidden)
        self.drafter.fc.weight.copy_(weight)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *,
        target: PreTrainedModel | None = None,
        revision: str | None = None,
        dtype: torch.dtype | None = None,
        shortlist: str | None = None,
        shortlist_size: int | None = None,
        max_clusters: int | None = None,
        fixed_clusters: int | None = None,
        max_shortlist_size: int | None = None,
        num_draft_tokens: int | None = None,
        draft_confidence: float | None = None,
        prompt_lookup_tokens: int | None = None,
        prompt_lookup_veto: float | None = None,
        tree_top_k: int | None = None,
        tree_depth: int | None = None,
        tree_total_tokens: int | None = None,
        allow_different_target: bool = False,
        **hub_kwargs,
    ) -> "DynaSpecAssistant":
        """Load an assistant from a local directory or a Hub repo id: our format, EAGLE-1/2 or EAGLE-3.

        With `target`, the assistant is checked against it, cast to its dtype/device and attached.
        `shortlist` ("full" | "frspec" | "vocabtrim" | "dynaspec" | "dynaspec-fixed") and the size/budget
        options, the chain's `num_draft_tokens`, `draft_confidence`, `prompt_lookup_tokens` and `prompt_lookup_veto`, and the tree shape (`tree_top_k`,
        `tree_depth`, `tree_total_tokens`, see DynaSpecConfig) override what the artifact's config says. Only
        JSON and safetensors files are read; pickled checkpoints are refused. The weights are checked against
        the artifact's `checksums.json` and for NaN/inf; `attach` refuses a target other than the one the
        assistant was made for (its embedding/LM-head fingerprint) unless `allow_different_target=True`.
        """
        directory = checkpoints.resolve_artifact_dir(pretrained_model_name_or_path, revision, **hub_kwargs)
        config_dict = checkpoints.read_config_dict(directory)
        integrity.verify_checksums(directory)
        state = checkpoints.read_state_dict(directory)
        layout = checkpoints.detect_layout(config_dict, set(state), directory / checkpoints.CONFIG_NAME)
        if layout == "dynaspec":
            config = DynaSpecConfig.from_dict(config_dict)
        else:
            num_layers = target.config.get_text_config().num_hidden_layers if target is not None else None
            kwargs = checkpoints.eagle_config_kwargs(config_dict, layout, num_layers)
            if target is not None:
                kwargs["target_model_type"] = target.config.get_text_config().model_type
            kwargs["target_name_or_path"] = config_dict.get("_name_or_path") or str(pretrained_model_name_or_path)
            state = checkpoints.eagle_state_dict(state, layout, kwargs)
            config = DynaSpecConfig(**kwargs)
        overrides = dict(shortlist=shortlist, shortlist_size=shortlist_size, max_clusters=max_clusters,
                         fixed_clusters=fixed_clusters, max_shortlist_size=max_shortlist_size,
                         num_draft_tokens=num_draft_tokens, draft_confidence=draft_confidence,
                         prompt_lookup_tokens=prompt_lookup_tokens, prompt_lookup_veto=prompt_lookup_veto,
                         tree_top_k=tree_top_k, tree_depth=tree_depth,
                         tree_total_tokens=tree_total_tokens)
        for key, value in overrides.items():
            if value is not None:
                setattr(config, key, value)
        config.validate_drafter()
        assistant = cls(config)
        assistant._load_checked(state, directory)
        assistant.card_data = model_card.read_card_data(directory)
        if dtype is not None:
            assistant.to(dtype)
        assistant.eval()
        return assistant.attach(target, allow_different_target) if target is not None else assistant

    def _load_checked(self, state: dict[str, torch.Tensor], directory) -> None:
        expected = self.state_dict()
        # Empty shortlist components (a published EAGLE checkpoint has none) need no stored tensor.
        state = {**{k: v for k, v in expected.items() if v.numel() == 0}, **state}
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        wrong_shape = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
        if missing or unexpected or wrong_shape:
            details = []
            if missing:
                details.append(f"missing {missing[:8]}")
            if unexpected:
                details.append(f"unexpected {unexpected[:8]}")
            if wrong_shape:
                details.append(
                    "wrong shape " + ", ".join(f"{k} {tuple(state[k].shape)} != {tuple(expected[k].shape)}"
                                              for k in wrong_shape[:4])
                )
            raise checkpoints.ArtifactError(
                f"The weights in {directory} do not match its config ({'; '.join(details)}). "
                "The artifact is corrupt or was written by an incompatible version; re-save or re-download it."
            )
        broken = integrity.non_finite_tensors(state)
        if broken:
            raise checkpoints.ArtifactError(
                f"The weights in {directory} hold NaN or inf values ({', '.join(broken[:6])}): a diverged training "
                "run or a corrupted file. Use an earlier checkpoint or retrain; such a drafter would draft nothing "
                "useful."
            )
        # Keep the stored dtype: a round trip is bit-exact.
        self.load_state_dict(state, strict=True, assign=True)

    # -- the target ------------------------------------------------------------------------------------
    @property
    def target(self) -> PreTrainedModel | None:
        return self._target

    def attach(self, target: PreTrainedModel, allow_different_target: bool = False) -> "DynaSpecAssistant":
        """Check the assistant fits `target`, borrow its embedding/final norm/LM head, match dtype and device.

        `allow_different_target=True` accepts a target whose weights differ from those the assistant was made
        for (same shapes and family; a deliberate reuse, e.g. on another fine-tune): output stays exact, only
        acceptance may drop."""
        self._check_compatible(target, allow_different_target)
        decoder = target.get_decoder()
        self.drafter.target = TargetParts(
            embed_tokens=target.get_input_embeddings(),
            final_norm=decoder.norm,
            lm_head=target.get_output_embeddings(),
        )
        self.__dict__["_target"] = target
        self.to(device=target.device, dtype=target.dtype)
        # d2t/t2d are integer/bool buffers; `.to(dtype)` leaves them alone.
        if target.dtype == torch.bfloat16 and target.device.type == "cpu" and cpu_rows.available():
            # The drafter's first step of a round reads every newly verified position (1..K+1 rows); the
            # kernel makes those rows cost one weight pass instead of one each (no extra memory). Its one-row
            # product is faster than PyTorch's too, so the drafter's one-token steps use it as well
            # (34.1 -> 32.0 ms per 2-token draft, benchmarks/results/drafter_one_row_05b.json). No row cap:
            # the drafter's pass over the prompt (its first step of a generate() call) is 4-5x faster through
            # the kernel too (741 rows: 1,754 -> 401 ms, benchmarks/results/drafter_prompt_pass_05b.json).
            cpu_verify.enable(self.drafter, method="kernel", min_rows=1, max_rows=cpu_verify.ANY_ROWS)
        hf_integration.install()
        return self

    def _check_compatible(self, target: PreTrainedModel, allow_different_target: bool = False) -> None:
        config = self.config
        text = target.config.get_text_config()
        problems = []
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

    # -- what the candidate generator needs -------------------------------------------------------------
    def target_hidden_state_selection(self) -> int | list[int]:
        """The `output_hidden_states` selection the target's forward must return (indices of hidden_states)."""
        if self.config.drafter_kind == "eagle3":
            return list(self.config.aux_hidden_state_layer_ids)
        if self.config.fused_hidden_state_ids:
            return list(self.config.fused_hidden_state_ids) + [-1]
        return -1

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The target's hidden-state tuple -> drafter features `[1, T, D]` (eagle), `[1, T, (n+1)D]` (eagle with
        n fused layers, the last hidden state last) or `[1, T, 3D]` (eagle3)."""
        if self.config.drafter_kind == "eagle3":
            return torch.cat([hidden_states[i] for i in self.config.aux_hidden_state_layer_ids], dim=-1)
        if self.config.fused_hidden_state_ids:
            return torch.cat([hidden_states[i] for i in self.config.fused_hidden_state_ids] + [hidden_states[-1]], dim=-1)
        return hidden_states[-1]

    def add_feature_fusion(self, fused_hidden_state_ids: list[int]) -> "DynaSpecAssistant":
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
            if self._target is not None:
                self._check_compatible(self._target)
        except Exception:
            self.config.fused_hidden_state_ids = None
            raise
        self.drafter.add_feature_fusion()
        weight = self.drafter.fc.weight
        self.drafter.fuse.to(device=weight.device, dtype=weight.dtype)
        if self._target is not None:  # route the new Linear through the CPU kernel like the drafter's others
            self.attach(self._target)
        return self

    def runtime_head(self):
        """The shortlist head drafting scores through (None: EAGLE-3's own reduced head)."""
        if self.config.drafter_kind == "eagle3":
            return None
        head = self.drafter.target.lm_head
        if getattr(head, "bias", None) is not None:
            raise ValueError("targets whose LM head has a bias are not supported by the shortlisted head yet")
        config = self.config
        # Building a head copies rows (the whole permuted head for DynaSpec): reuse it across generate() calls
        # while nothing it depends on has changed.
        key = (config.shortlist, config.shortlist_size, config.max_clusters, config.fixed_clusters,
               config.max_shortlist_size, head.weight.data_ptr(), head.weight._version,
               tuple((t.data_ptr(), t._version) for t in self.shortlists.state_dict().values()))
        cached = self.__dict__.get("_runtime_head")
        if cached is None or cached[0] != key:
            cached = (key, build_head(config.shortlist, head.weight, self.shortlists, config))
            self.__dict__["_runtime_head"] = cached
        return cached[1]

    def make_candidate_generator(self, target, input_ids, generation_config, logits_processor, model_kwargs):
        """Called by transformers' `generate()` (through hf_integration) once per call."""
        if self._target is None:
            self.attach(target)
        elif self._target is not target:
            raise AssistantMismatchError(
                "This assistant is attached to a different target model object. Call "
                "`assistant.attach(model)` before `model.generate(..., assistant_model=assistant)`."
            )
        check_chain_inputs(input_ids, generation_config, model_kwargs)
        self._follow_target_dtype_and_device(target)
        self.stats = DraftStats()
        session = ChainDraftSession(
            self.drafter,
            vocab_size=self.config.vocab_size,
            do_sample=bool(generation_config.do_sample),
            logits_processor=logits_processor,
            head=self.runtime_head(),
            confidence=self.config.draft_confidence,
        )
        return hf_integration.EagleCandidateGenerator(
            self, session, num_draft_tokens=self.config.num_draft_tokens, max_length=generation_config.max_length
        )

    def _follow_target_dtype_and_device(self, target: PreTrainedModel) -> None:
        """The target was cast or moved after `attach` (e.g. `model.to(torch.bfloat16)`): follow it, loudly."""
        weight = self.drafter.fc.weight
        if weight.dtype != target.dtype or weight.device != target.device:
            import warnings

            warnings.warn(
                f"the target is now {target.dtype} on {target.device}, the assistant was attached as {weight.dtype} "
                f"on {weight.device}; re-attaching it to follow the target. Call assistant.attach(model) after "
                "casting or moving the model to avoid this check.",
                stacklevel=3,
            )
            self.attach(target, allow_different_target=True)

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save config.json + model.safetensors (transformers), checksums.json (the weights' sha256), card.json and
        a generated README.md model card."""
        super().save_pretrained(save_directory, *args, **kwargs)
        directory = Path(save_directory)
        integrity.write_checksums(directory)
        if self.card_data:
            (directory / model_card.CARD_DATA_NAME).write_text(json.dumps(self.card_data, indent=2) + "\n")
        (directory / "README.md").write_text(model_card.render_model_card(self.config, self.card_data))

    def push_to_hub(
        self,
        repo_id: str,
        *,
        private: bool | None = None,
        token: str | None = None,
        revision: str | None = None,
        commit_message: str = "Upload hf-dynaspec assistant",
        endpoint: str | None = None,
    ):
        """Upload the whole artifact (config, weights incl. clusters/router/frequency lists, card.json and the
        model card; never the target) to a Hub repo. `endpoint`: another Hub server (default: HF_ENDPOINT)."""
        import tempfile

        from huggingface_hub import HfApi

        api = HfApi(token=token, endpoint=endpoint)
        api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder)
            return api.upload_folder(
                repo_id=repo_id, folder_path=folder, revision=revision, commit_message=commit_message
            )

    def generate(self, model: PreTrainedModel, **generate_kwargs):
        """Tree decoding with this assistant: `model.generate(**generate_kwargs, custom_generate=tree_generate,
        drafter=self)`. Takes every ordinary generate() option plus `tree_top_k`, `tree_depth`,
        `tree_total_tokens`; chain drafting stays `model.generate(..., assistant_model=assistant)`."""
        from hf_dynaspec.tree import tree_generate

        if "assistant_model" in generate_kwargs or "custom_generate" in generate_kwargs:
            raise ValueError("assistant.generate(model, ...) runs tree decoding itself: do not pass assistant_model "
                             "or custom_generate")
        # generate() does not hand `tokenizer` on when custom_generate is a callable (transformers 5.23), so
        # stop strings would fail there: build their stopping criterion here, as generate() would.
        stop_strings = generate_kwargs.pop("stop_strings", None)
        tokenizer = generate_kwargs.pop("tokenizer", None)
        if stop_strings is not None:
            from transformers import StoppingCriteriaList, StopStringCriteria

            if tokenizer is None:
                raise ValueError("stop_strings needs the model's tokenizer: pass tokenizer=")
            criteria = list(generate_kwargs.pop("stopping_criteria", None) or [])
            generate_kwargs["stopping_criteria"] = StoppingCriteriaList(
                [*criteria, StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings)])
        return model.generate(**generate_kwargs, custom_generate=tree_generate, drafter=self)

    def forward(self, *args, **kwargs):
        raise TypeError(
            "DynaSpecAssistant is not called directly: pass it to model.generate(..., assistant_model=assistant)."
        )


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

