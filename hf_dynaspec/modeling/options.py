"""`DynaSpecGenerationConfig`: how an assistant drafts, apart from what it is.

The options a drafting run reads (draft length, confidence stop, prompt lookup, which LM-head rows the drafter
scores, the tree's shape) are generation options, not architecture: they live in a `GenerationConfig`
subclass, `assistant.generation_config`, saved beside the artifact as generation_config.json and never in
config.json. Where transformers has a field for the same knob, its name is used; as for transformers' own
assistants (whose `num_assistant_tokens` is read from the assistant model's generation config), a run reads
them from the assistant: `assistant.generation_config.num_assistant_tokens = 4`.

| option | transformers field | meaning |
| --- | --- | --- |
| K draft tokens per round (chain) | `num_assistant_tokens` | default 2 |
| confidence stop (chain) | `assistant_confidence_threshold` | stop before a position whose top probability is below it; 0 = off |
| prompt lookup tokens | `prompt_lookup_num_tokens` | 0 = off |
| longest n-gram looked up | `max_matching_ngram_size` | default 3 |

and our own: `draft_plan`, `draft_capture`, `auto_max_assistant_tokens`, `target_verify_kernel`,
`suffix_cache_num_tokens`, `suffix_cache_max_tokens`, `verification`, `prompt_lookup_min_ngram`,
`prompt_lookup_veto`, `shortlist`, `shortlist_size`, `max_clusters`, `fixed_clusters`, `max_shortlist_size`,
`shortlist_rows`, `tree_top_k`, `tree_depth`, `tree_total_tokens`, `expected_acceptance` (the docstring of
`DynaSpecGenerationConfig` says what each does).

Artifacts written before this split kept these keys in config.json, some under older names
(`num_draft_tokens`, `draft_confidence`, `prompt_lookup_tokens`, `prompt_lookup_max_ngram`):
`split_legacy_options` takes them out of a config dict, with a FutureWarning, so that they still load.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import GenerationConfig

from hf_dynaspec.modeling.acceptance_prior import priors_from_config

SHORTLIST_STRATEGIES = ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed")

# Defaults of every drafting option (the transformers-named ones included).
OPTION_DEFAULTS: dict[str, Any] = {
    "num_assistant_tokens": 2,
    "assistant_confidence_threshold": 0.0,
    "prompt_lookup_num_tokens": 0,
    "prompt_lookup_min_ngram": 2,
    "max_matching_ngram_size": 3,
    "prompt_lookup_veto": 1.0,
    "shortlist": "full",
    "shortlist_size": None,
    "max_clusters": 16,
    "fixed_clusters": 8,
    "max_shortlist_size": None,
    "shortlist_rows": "clusters",
    "tree_top_k": 4,
    "tree_depth": 4,
    "tree_total_tokens": 8,
    "draft_plan": "auto",
    "auto_max_assistant_tokens": 8,
    "suffix_cache_num_tokens": 16,
    "suffix_cache_max_tokens": 32768,
    "verification": "auto",
    "target_verify_kernel": "auto",
    "expected_acceptance": None,
    "draft_capture": "off",
    "verify_round": "eager",
}
# What `DynaSpecAssistant.for_target` drafts with. Prompt lookup down to 1-gram matches: with no drafter to fall back
# on, a copy after the context's last id alone is the only draft there is, and the planner learns per match length
# whether it pays (benchmarks/results/lookup_76e: 1.44x -> 1.64x plain in the 0.5B's simulated AVX-512 bf16 session).
DRAFTER_FREE_OPTIONS = dict(draft_plan="auto", shortlist="full", prompt_lookup_num_tokens=10, suffix_cache_num_tokens=16,
                            prompt_lookup_min_ngram=1)
DRAFT_PLANS = ("auto", "fixed", "adl")
VERIFICATIONS = ("auto", "token", "block")
# Options that transformers' GenerationConfig has too (same name, same meaning).
TRANSFORMERS_FIELDS = ("num_assistant_tokens", "assistant_confidence_threshold", "prompt_lookup_num_tokens",
                       "max_matching_ngram_size")
# Names used by early builds of hf-dynaspec (in config.json and as keyword arguments) -> the option's name now.
LEGACY_NAMES = {
    "num_draft_tokens": "num_assistant_tokens",
    "draft_confidence": "assistant_confidence_threshold",
    "prompt_lookup_tokens": "prompt_lookup_num_tokens",
    "prompt_lookup_max_ngram": "max_matching_ngram_size",
}
# Every key an old config.json may hold that is an option now (under its old or its current name).
LEGACY_CONFIG_KEYS = set(LEGACY_NAMES) | (set(OPTION_DEFAULTS) - set(TRANSFORMERS_FIELDS))


class DraftingConfig(GenerationConfig):
    """A `GenerationConfig` that also holds a drafter's options: `option_defaults` (set by each subclass) names them
    and their defaults; `validate_options` checks them on construction and again when a call starts."""

    option_defaults: dict[str, Any] = {}

    def __init__(self, **kwargs):
        values = {name: kwargs.pop(name, default) for name, default in self.option_defaults.items()}
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        self.validate_options()

    def drafting_options(self) -> dict[str, Any]:
        """Only the drafting options, `{name: value}`."""
        return {name: getattr(self, name) for name in self.option_defaults}

    def validate_options(self) -> None:
        """Raise `ValueError` naming the bad option and the fix."""

    def _require(self, ok: bool, name: str, expected: str) -> None:
        if not ok:
            raise ValueError(f"{type(self).__name__}.{name} must be {expected}; got {getattr(self, name)!r}.")


class DynaSpecGenerationConfig(DraftingConfig):
    """Drafting options of a `DynaSpecAssistant` (`assistant.generation_config`), with these defaults:

    - `draft_plan` ("auto"): "auto" picks each round's draft (drafter chain length, prompt-lookup or suffix-cache
      length, or none) for the most expected tokens per second, from costs measured on this machine once
      (hf_dynaspec.generation.costs, cached) and acceptance learnt online (hf_dynaspec.drafting.planning.planner);
      it then ignores `num_assistant_tokens` and `assistant_confidence_threshold` is only a hard floor.
      "fixed": K = `num_assistant_tokens` every round, lookup first (the behaviour before planned rounds).
      "adl": as "fixed", but the drafter's K follows DiffuSpec's adaptive draft length (the smoothed accepted
      length plus one, 1..`num_assistant_tokens`; hf_dynaspec.drafting.lattice.AdaptiveDraftLength).
      Sampled runs under "auto" are exact but not reproducible from a seed across machines (the plan reads
      measured costs); use "fixed" where a seed must reproduce a sample.
    - `auto_max_assistant_tokens` (8): the longest drafter chain "auto" may draft.
    - `target_verify_kernel` ("auto"): under `draft_plan="auto"` on a bf16 CPU target, the target's verification
      forwards (2..n rows) go through the CPU rows kernel (hf_dynaspec.kernels.verify_rows) for the row counts
      where it was measured faster than PyTorch here (measured once, cached), during the assisted call only; its
      one-token steps and prefills keep PyTorch's kernels. "off": never.
    - `suffix_cache_num_tokens` (16): the suffix cache (hf_dynaspec.drafting.lookup: the request and the
      assistant's earlier outputs) drafts up to this many tokens under "fixed", where a suffix-cache draft, when
      there is one, comes first, as a prompt-lookup draft does; 0: off. Under "auto" any value > 0 turns it on
      and the planner drafts as much of a copy (up to 32 tokens) as its costs and learnt acceptance say pays.
    - `suffix_cache_max_tokens` (32768): tokens of earlier outputs and corpus the suffix cache keeps.
    - `verification` ("auto"): how sampled drafts are verified: "token" (token by token, Leviathan et al.) or
      "block" (Sun et al., ICLR 2025: the draft block jointly; never fewer accepted tokens in expectation, the
      same distribution, the same target forward). "auto" picks block: with the same forward and never fewer
      tokens there is nothing to weigh (0.5B sampled: tau 1.94 vs 1.71 token, benchmarks/results/sampled_75b).
      Greedy decoding is unaffected.
    - `num_assistant_tokens` (2): K, tokens drafted per verification (chain drafting). 2 is the measured optimum
      for the shipped 0.5B assistant on 2-core CPUs (benchmarks/results/NOTEBOOK.md); better drafters and GPUs want 4-6.
    - `assistant_confidence_threshold` (0.0): chain drafting stops before the first position whose most likely
      draft token has a probability below this (read before drawing, so sampling stays exact); a round may then
      draft nothing. 0 always drafts K tokens.
    - `prompt_lookup_num_tokens` (0): when > 0, a round first looks the context's last n-gram up in the context
      and drafts up to this many of the tokens that followed it instead of running the drafter (under "auto":
      as many, up to 32, as the planner says pay). 0: off.
    - `prompt_lookup_min_ngram` (2; 1 for `DynaSpecAssistant.for_target`), `max_matching_ngram_size` (3): the
      n-gram sizes tried, longest first.
    - `prompt_lookup_veto` (1.0): the drafter overrules a lookup draft when its own most likely first token
      differs and has a probability above this. 1.0 never vetoes (and skips the check).
    - `shortlist` ("full"): the LM-head rows an eagle drafter scores: "full", "frspec" / "vocabtrim" (the first
      `shortlist_size` ids of a stored frequency ranking), "dynaspec" (the first R(t) rows of the router's
      cluster ranking at draft position t, the last cluster cut, plus the always-included ids; capped by
      `max_shortlist_size`) or "dynaspec-fixed" (R(0) at every position). The stored components are built by
      recipes/build_shortlists.py.
    - `shortlist_rows` ("clusters"): DynaSpec's row budget R(t), an int or one int per draft position (the last
      for every later position); the shipped artifacts store the mean rows the cluster-count rule scored on
      their dev prompts. "clusters" (artifacts saved before the row budget): `max_clusters` clusters' worth of
      rows at positions 0 and 1, then the paper's k(t) schedule (`fixed_clusters` for "dynaspec-fixed"), each
      cluster counted at the rows the next token's cluster holds on average (hf_dynaspec.drafting.selector).
    - `draft_capture` ("off"): greedy chain drafts as one fixed-shape function of K tokens
      (hf_dynaspec.drafting.captured): "compile" compiles it with torch.compile(fullgraph=True) (CUDA graphs on
      a GPU, mode "reduce-overhead": one per K, rows and cache capacity; the first call of each compiles),
      "eager" runs it uncompiled, "off" drafts step by step. The same drafts either way. Not yet timed on a GPU.
    - `verify_round` ("eager"): the public routes' target KV (hf_dynaspec.generation.static_round): "eager" grows
      a DynamicCache and cuts it back each round; "static" keeps a StaticCache sized per call and reads each round
      at a power-of-two width, the verify forward compiled once per width (CUDA graphs on a GPU); one prompt, full-
      attention targets. The assistant_model= route is transformers' loop: it stays eager, and says so once.
    - `expected_acceptance` (None): the drafter's acceptance measured with its target when the artifact was
      packaged (per draft position, confidence bin and tree depth; hf_dynaspec.modeling.acceptance_prior), where
      the "auto" planner's tables start. None: 0.5 at every position (artifacts packaged before it existed).
    - `tree_top_k` (4), `tree_depth` (4), `tree_total_tokens` (8): EAGLE-2 tree drafting: children per expanded
      node and nodes expanded per depth, maximum depth, draft tokens kept (the target verifies
      tree_total_tokens + 1 tokens per pass). Sized for CPU verification (docs/trees.md).
    """

    option_defaults = OPTION_DEFAULTS

    def validate_options(self) -> None:
        for name in ("num_assistant_tokens", "tree_top_k", "tree_depth", "tree_total_tokens", "max_clusters",
                     "fixed_clusters", "auto_max_assistant_tokens", "suffix_cache_max_tokens"):
            self._require(is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "a positive integer")
        for name in ("shortlist_size", "max_shortlist_size"):
            value = getattr(self, name)
            self._require(value is None or (is_int(value) and value >= 1), name, "a positive integer or None")
        rows = self.shortlist_rows
        self._require(rows == "clusters" or (is_int(rows) and rows >= 1) or (
            isinstance(rows, (list, tuple)) and len(rows) > 0 and all(is_int(r) and r >= 1 for r in rows)),
            "shortlist_rows", "a positive integer, a non-empty list of positive integers (rows per draft "
            "position) or \"clusters\" (max_clusters' worth of rows)")
        if isinstance(rows, tuple):
            self.shortlist_rows = list(rows)
        threshold = self.assistant_confidence_threshold
        self._require(is_number(threshold) and 0.0 <= threshold < 1.0, "assistant_confidence_threshold",
               "a probability threshold in [0, 1) (0 turns the confidence stop off)")
        self._require(is_int(self.prompt_lookup_num_tokens) and self.prompt_lookup_num_tokens >= 0,
               "prompt_lookup_num_tokens", "an integer >= 0 (0 turns prompt lookup off)")
        low, high = self.prompt_lookup_min_ngram, self.max_matching_ngram_size
        self._require(is_int(low) and is_int(high) and 1 <= low <= high, "prompt_lookup_min_ngram",
               f"an integer with 1 <= prompt_lookup_min_ngram <= max_matching_ngram_size (got {low!r} and {high!r})")
        veto = self.prompt_lookup_veto
        self._require(is_number(veto) and 0.0 <= veto <= 1.0, "prompt_lookup_veto",
               "a probability in [0, 1] above which the drafter's disagreeing top token overrules a lookup draft "
               "(1.0 turns the check off)")
        self._require(self.shortlist in SHORTLIST_STRATEGIES, "shortlist", f"one of {SHORTLIST_STRATEGIES}")
        self._require(self.draft_plan in DRAFT_PLANS, "draft_plan", f"one of {DRAFT_PLANS} (\"auto\": planned from measured "
               "costs, \"fixed\": num_assistant_tokens every round)")
        self._require(self.verification in VERIFICATIONS, "verification", f"one of {VERIFICATIONS}")
        self._require(self.target_verify_kernel in ("auto", "off"), "target_verify_kernel", "\"auto\" or \"off\"")
        self._require(self.draft_capture in ("off", "eager", "compile"), "draft_capture",
                      "\"off\", \"eager\" or \"compile\"")
        self._require(self.verify_round in ("eager", "static"), "verify_round",
                      "\"eager\" (a growing cache) or \"static\" (a StaticCache, verify compiled per width bucket)")
        self._require(is_int(self.suffix_cache_num_tokens) and self.suffix_cache_num_tokens >= 0,
               "suffix_cache_num_tokens", "an integer >= 0 (0 turns the suffix cache off)")
        priors_from_config(self.expected_acceptance)  # raises naming the fault

    def with_options(self, **options) -> DynaSpecGenerationConfig:
        """A validated copy with `options` (current or legacy names) set; None values are ignored."""
        given = {k: v for k, v in normalise_option_names(options).items() if v is not None}
        if given.keys() & {"max_clusters", "fixed_clusters"} and "shortlist_rows" not in given:
            given["shortlist_rows"] = "clusters"  # a cluster budget asked for by name is the budget, stored rows aside
        values = {**self.to_dict(), **given}
        values.pop("transformers_version", None)
        return DynaSpecGenerationConfig(**values)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def normalise_option_names(options: dict[str, Any], where: str = "keyword argument") -> dict[str, Any]:
    """Map legacy option names to the current ones, with a FutureWarning naming each."""
    renamed = {}
    for name, value in options.items():
        if name in LEGACY_NAMES:
            warnings.warn(f"the {where} {name!r} is now the drafting option {LEGACY_NAMES[name]!r} "
                          "(DynaSpecGenerationConfig); the old name will be removed in hf-dynaspec 0.2.",
                          FutureWarning, stacklevel=3)
            name = LEGACY_NAMES[name]
        elif name not in OPTION_DEFAULTS:
            raise TypeError(f"unknown drafting option {name!r}; the options are {sorted(OPTION_DEFAULTS)}")
        renamed[name] = value
    return renamed


def split_legacy_options(config_dict: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An old config.json dict -> (the architecture part, the drafting options it held, current names). Says
    nothing: `merge_legacy_options` warns, once it knows whether a generation_config.json overrides them."""
    architecture = {k: v for k, v in config_dict.items() if k not in LEGACY_CONFIG_KEYS}
    legacy = {LEGACY_NAMES.get(k, k): v for k, v in config_dict.items() if k in LEGACY_CONFIG_KEYS}
    return architecture, legacy


def merge_legacy_options(legacy: dict[str, Any], stored: dict[str, Any] | None) -> dict[str, Any]:
    """The drafting options of an artifact: its generation_config.json (`stored`; None when it has none) over the
    options its config.json still holds (`legacy`, written by an early build), with one FutureWarning that says
    which legacy values are used and which are ignored because generation_config.json sets the option."""
    if not legacy:
        return dict(stored or {})
    stored = stored or {}
    used = sorted(k for k in legacy if k not in stored)
    ignored = {k: (legacy[k], stored[k]) for k in sorted(legacy) if k in stored and stored[k] != legacy[k]}
    parts = [f"this artifact's config.json holds drafting options {sorted(legacy)} (written by an early build of hf-dynaspec); "
             "they now live in generation_config.json (DynaSpecGenerationConfig)."]
    if used:
        parts.append(f"Used from config.json: {used} (generation_config.json does not set them).")
    if ignored:
        parts.append("Ignored, because generation_config.json sets them: " + ", ".join(
            f"{k}={old!r} (generation_config.json: {new!r})" for k, (old, new) in ignored.items()) + ".")
    parts.append("Save the assistant again (save_pretrained) to move them and silence this warning.")
    warnings.warn(" ".join(parts), FutureWarning, stacklevel=3)
    return {**legacy, **stored}
