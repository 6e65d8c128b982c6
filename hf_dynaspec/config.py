"""`DynaSpecConfig`: the one configuration class of an assistant (drafter + later shortlists).

It records what the drafter is (architecture, sizes, which target layers it reads) and which target it was
built for (name, revision, vocabulary and hidden sizes), never the target's weights. It is version-stamped
and forward compatible: unknown keys from a newer release are kept and warned about, not rejected.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import PretrainedConfig

DRAFTER_KINDS = ("eagle", "eagle3")

# Keys written by this release. Anything else found in a config.json is kept but warned about.
_KNOWN_KEYS = {
    "drafter_kind", "layer_family", "target_model_type", "target_name_or_path", "target_revision", "vocab_size",
    "target_hidden_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "rms_norm_eps", "rope_parameters", "max_position_embeddings", "hidden_act",
    "attention_bias", "fc_bias", "use_target_norm", "aux_hidden_state_layer_ids", "draft_vocab_size",
    "fused_hidden_state_ids",
    "num_draft_tokens", "draft_confidence", "prompt_lookup_tokens", "prompt_lookup_min_ngram",
    "prompt_lookup_max_ngram", "prompt_lookup_veto", "library_version", "layer_config", "shortlist", "shortlist_size",
    "frequency_list_size",
    "vocabtrim_list_size", "num_clusters", "num_always_ids", "router_hidden_size", "max_clusters",
    "fixed_clusters", "max_shortlist_size", "tree_top_k", "tree_depth", "tree_total_tokens", "target_fingerprint",
}
# What a saved hf-dynaspec config.json must state: without them the defaults above would describe another drafter.
REQUIRED_SAVED_KEYS = ("drafter_kind", "layer_family", "target_model_type", "vocab_size", "hidden_size",
                       "target_hidden_size", "intermediate_size", "num_attention_heads")
SHORTLIST_STRATEGIES = ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed")


def _current_library_version() -> str:
    from hf_dynaspec import __version__

    return __version__


class DynaSpecConfig(PretrainedConfig):
    """Configuration of a `DynaSpecAssistant`.

    Args:
        drafter_kind: `"eagle"` (EAGLE-1/2: fc over [token embedding ; target last hidden state], one decoder
            layer, the target's final norm and LM head borrowed) or `"eagle3"` (fc over three target layers,
            its own norm and reduced-vocabulary head with `d2t`/`t2d` maps).
        layer_family: transformers `model_type` whose decoder-layer classes build the drafter's layer
            (the target's own family for assistants made here; `"llama"` for public EAGLE checkpoints).
        target_model_type: `model_type` of the target (e.g. `"qwen2"`), checked when attaching.
        target_name_or_path: where the target came from (provenance, for humans and for checks).
        target_revision: the target's revision, when known.
        vocab_size: the target's LM-head rows V. Reported as the assistant's vocabulary so that transformers
            treats target and assistant as sharing one tokenizer.
        target_hidden_size: D of the target's hidden states the drafter reads.
        hidden_size: the drafter's decoder layer width (with `intermediate_size`, `num_attention_heads`,
            `num_key_value_heads`, `head_dim`, `rms_norm_eps`, `rope_parameters`, `max_position_embeddings`,
            `hidden_act` and `attention_bias`, as in the family's own config).
        fc_bias: whether the input fusion `fc` has a bias (EAGLE-1 checkpoints do).
        use_target_norm: apply the target's final norm before the LM head (own format). Public EAGLE-1/2
            checkpoints regress post-norm features directly and set this to False.
        aux_hidden_state_layer_ids: EAGLE-3 only: indices into the target's `hidden_states` tuple that are
            fused by `fc` (entries are hidden states *entering* a layer, `hidden_states[0]` is the embedding).
        draft_vocab_size: EAGLE-3 only: rows of the drafter's own LM head.
        fused_hidden_state_ids: eagle only, optional: indices into the target's `hidden_states` tuple (as for
            `aux_hidden_state_layer_ids`) whose states are fused with the target's last (post-norm) hidden state
            into the feature of a verified position: `f = fuse([rms(h_i) ; ... ; h_last])` (each fused state
            RMS-normalised without weights), EAGLE-3's multi-layer
            features with EAGLE-1/2's feature regression and the target's own head (so shortlists apply).
            `fuse` starts as a pass-through of `h_last`, so adding fusion to a trained drafter changes nothing
            until it is trained. None (the default): `f = h_last`.
        shortlist: which rows of the LM head the drafter scores: "full" (EAGLE baseline), "frspec" /
            "vocabtrim" (the first `shortlist_size` ids of a stored frequency ranking), "dynaspec" (router-chosen
            clusters with the position-aware budget k(t) from `max_clusters`) or "dynaspec-fixed"
            (`fixed_clusters` at every position). `max_shortlist_size` caps a DynaSpec shortlist.
        num_clusters: vocabulary clusters stored in the artifact (with `frequency_list_size`,
            `vocabtrim_list_size`, `num_always_ids` and `router_hidden_size`: sizes of the stored shortlist
            components, set by the builders, not by hand).
        num_draft_tokens: K, tokens drafted per verification (chain drafting). The default, 2, is the measured
            optimum for the shipped 0.5B assistant on the 2-core AVX2 CPUs this project is tested on, with the
            verification kernel of hf_dynaspec.cpu_verify (1.05x vanilla, against 1.01x at K = 3 and 0.94x at
            K = 4; docs/results.md): verification is nearly free up to 4 tokens there, but this drafter's
            third and fourth tokens are rarely accepted. Better drafters and GPUs want 4-6.
        draft_confidence: chain drafting stops before the first token whose drafter probability (softmax over
            the rows scored) is below this, so a round may draft nothing and the target takes a plain one-token
            step. 0 (the default) always drafts `num_draft_tokens`. Worth it only where verifying k tokens costs
            much more than one (fp32 shadows or native bf16 on AVX2: 0.60x -> 0.88x at 0.5-0.7); with the
            verification kernel it gains nothing (docs/results.md).
        prompt_lookup_tokens: when > 0, chain drafting first looks the context's last n-gram up in the context
            (prompt and answer so far, hf_dynaspec.lookup) and, if it occurred before, drafts up to this many of
            the tokens that followed it instead of running the drafter. 0 (the default) turns it off.
        prompt_lookup_min_ngram, prompt_lookup_max_ngram: the n-gram sizes tried, longest first (defaults 2, 3).
        prompt_lookup_veto: lets the drafter check a lookup draft first. When the drafter's own most likely next
            token differs from the draft's first token and has a probability above this, the round drafts with
            the drafter instead. 1.0 (the default) never vetoes and skips the check; 0 vetoes on any
            disagreement. The check costs the drafter's head at one position in rounds where lookup found a
            match; a wrong lookup draft costs a whole round.
        tree_top_k, tree_depth, tree_total_tokens: EAGLE-2 tree drafting (hf_dynaspec.tree): children proposed
            per expanded node and nodes expanded per depth, maximum depth, and draft tokens kept in the tree
            (the target verifies tree_total_tokens + 1 tokens per pass). EAGLE-2's GPU defaults are 10 / 5-7 /
            60; the defaults here are sized for CPU verification (docs/trees.md has the measurements).
    """

    model_type = "dynaspec"

    def __init__(
        self,
        drafter_kind: str = "eagle",
        layer_family: str = "llama",
        target_model_type: str | None = None,
        target_name_or_path: str | None = None,
        target_revision: str | None = None,
        target_fingerprint: dict[str, Any] | None = None,
        vocab_size: int = 32000,
        target_hidden_size: int | None = None,
        hidden_size: int = 4096,
        intermediate_size: int = 11008,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        rms_norm_eps: float = 1e-6,
        rope_parameters: dict[str, Any] | None = None,
        max_position_embeddings: int = 32768,
        hidden_act: str = "silu",
        attention_bias: bool = False,
        fc_bias: bool = False,
        use_target_norm: bool = True,
        aux_hidden_state_layer_ids: list[int] | None = None,
        draft_vocab_size: int | None = None,
        fused_hidden_state_ids: list[int] | None = None,
        num_draft_tokens: int = 2,
        draft_confidence: float = 0.0,
        prompt_lookup_tokens: int = 0,
        prompt_lookup_min_ngram: int = 2,
        prompt_lookup_max_ngram: int = 3,
        prompt_lookup_veto: float = 1.0,
        library_version: str | None = None,
        layer_config: dict[str, Any] | None = None,
        shortlist: str = "full",
        shortlist_size: int | None = None,
        frequency_list_size: int = 0,
        vocabtrim_list_size: int = 0,
        num_clusters: int = 0,
        num_always_ids: int = 0,
        router_hidden_size: int = 256,
        max_clusters: int = 16,
        fixed_clusters: int = 8,
        max_shortlist_size: int | None = None,
        tree_top_k: int = 4,
        tree_depth: int = 4,
        tree_total_tokens: int = 8,
        **kwargs,
    ):
        unknown = sorted(k for k in kwargs if k not in _KNOWN_KEYS and not hasattr(PretrainedConfig(), k))
        if unknown:
            warnings.warn(
                f"DynaSpecConfig: ignoring unknown keys {unknown} (written by a newer hf-dynaspec?). "
                "They are kept in the config but have no effect.",
                stacklevel=2,
            )
        self.drafter_kind = drafter_kind
        self.layer_family = layer_family
        self.target_model_type = target_model_type
        self.target_name_or_path = target_name_or_path
        self.target_revision = target_revision
        # A few embedding/LM-head values of the target (hf_dynaspec.integrity), checked at attach.
        self.target_fingerprint = target_fingerprint
        self.vocab_size = vocab_size
        self.target_hidden_size = target_hidden_size if target_hidden_size is not None else hidden_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads if num_key_value_heads is not None else num_attention_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        self.rms_norm_eps = rms_norm_eps
        self.rope_parameters = rope_parameters or {"rope_type": "default", "rope_theta": 10000.0}
        self.max_position_embeddings = max_position_embeddings
        self.hidden_act = hidden_act
        self.attention_bias = attention_bias
        self.fc_bias = fc_bias
        self.use_target_norm = use_target_norm
        self.aux_hidden_state_layer_ids = list(aux_hidden_state_layer_ids) if aux_hidden_state_layer_ids else None
        self.draft_vocab_size = draft_vocab_size
        self.fused_hidden_state_ids = list(fused_hidden_state_ids) if fused_hidden_state_ids else None
        self.num_draft_tokens = num_draft_tokens
        self.draft_confidence = float(draft_confidence)
        self.prompt_lookup_tokens = prompt_lookup_tokens
        self.prompt_lookup_min_ngram = prompt_lookup_min_ngram
        self.prompt_lookup_max_ngram = prompt_lookup_max_ngram
        self.prompt_lookup_veto = prompt_lookup_veto
        # Extra family-specific layer settings (e.g. Qwen3's q/k norms need nothing, but a family may).
        self.layer_config = dict(layer_config or {})
        self.shortlist = shortlist
        self.shortlist_size = shortlist_size
        self.frequency_list_size = frequency_list_size
        self.vocabtrim_list_size = vocabtrim_list_size
        self.num_clusters = num_clusters
        self.num_always_ids = num_always_ids
        self.router_hidden_size = router_hidden_size
        self.max_clusters = max_clusters
        self.fixed_clusters = fixed_clusters
        self.max_shortlist_size = max_shortlist_size
        self.tree_top_k = tree_top_k
        self.tree_depth = tree_depth
        self.tree_total_tokens = tree_total_tokens
        # Stamped at creation; a config loaded from disk keeps the version that wrote it.
        self.library_version = library_version or _current_library_version()
        super().__init__(**kwargs)
        self.validate_drafter()

    def validate_drafter(self) -> None:
        """Raise `ValueError` naming the bad field and the fix."""
        if self.drafter_kind not in DRAFTER_KINDS:
            raise ValueError(f"drafter_kind must be one of {DRAFTER_KINDS}, got {self.drafter_kind!r}.")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_draft_tokens",
                     "tree_top_k", "tree_depth", "tree_total_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DynaSpecConfig.{name} must be a positive integer, got {value!r}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})."
            )
        if not 0.0 <= self.draft_confidence < 1.0:
            raise ValueError(
                f"DynaSpecConfig.draft_confidence is a probability threshold in [0, 1) (0 turns it off), "
                f"got {self.draft_confidence!r}."
            )
        if not isinstance(self.prompt_lookup_tokens, int) or self.prompt_lookup_tokens < 0:
            raise ValueError(
                f"DynaSpecConfig.prompt_lookup_tokens must be an integer >= 0 (0 turns prompt lookup off), "
                f"got {self.prompt_lookup_tokens!r}."
            )
        low, high = self.prompt_lookup_min_ngram, self.prompt_lookup_max_ngram
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high):
            raise ValueError(
                f"DynaSpecConfig.prompt_lookup_min_ngram and prompt_lookup_max_ngram must be integers with "
                f"1 <= min <= max, got {low!r} and {high!r}."
            )
        veto = self.prompt_lookup_veto
        if isinstance(veto, bool) or not isinstance(veto, (int, float)) or not 0.0 <= veto <= 1.0:
            raise ValueError(
                f"DynaSpecConfig.prompt_lookup_veto is a probability in [0, 1] above which the drafter's disagreeing "
                f"top token overrules a lookup draft (1.0 turns the check off), got {veto!r}."
            )
        if self.shortlist not in SHORTLIST_STRATEGIES:
            raise ValueError(f"shortlist must be one of {SHORTLIST_STRATEGIES}, got {self.shortlist!r}.")
        if self.drafter_kind == "eagle3" and self.shortlist != "full":
            raise ValueError(
                "An eagle3 drafter has its own static draft vocabulary (d2t); shortlist strategies apply to eagle "
                f"drafters that borrow the target's head. Use shortlist='full', got {self.shortlist!r}."
            )
        for name in ("max_clusters", "fixed_clusters"):
            if getattr(self, name) < 1:
                raise ValueError(f"DynaSpecConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.fused_hidden_state_ids is not None:
            ids = self.fused_hidden_state_ids
            if self.drafter_kind != "eagle":
                raise ValueError(
                    "fused_hidden_state_ids applies to eagle drafters; an eagle3 drafter fuses its "
                    "aux_hidden_state_layer_ids already."
                )
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids) or len(set(ids)) != len(ids):
                raise ValueError(
                    "fused_hidden_state_ids must be distinct non-negative indices into the target's hidden_states "
                    f"(0 is the embedding output, i the input of layer i), got {ids!r}."
                )
        if self.drafter_kind == "eagle3":
            if not self.draft_vocab_size:
                raise ValueError("An eagle3 drafter needs draft_vocab_size (rows of its own LM head).")
            if not self.aux_hidden_state_layer_ids or len(self.aux_hidden_state_layer_ids) != 3:
                raise ValueError(
                    "An eagle3 drafter fuses exactly three target hidden states: set aux_hidden_state_layer_ids "
                    f"to three indices, got {self.aux_hidden_state_layer_ids!r}."
                )
