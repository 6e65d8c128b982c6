"""How Medusa heads (or any lattice source) draft: `MedusaGenerationConfig`, saved with the heads as
generation_config.json, as a `DynaSpecAssistant` saves its `DynaSpecGenerationConfig`; `speculative_generate`'s
keyword arguments, by the same names, override it per call.

- `draft_plan`: "fixed" (default): `lattice_draft` every round; "auto": planned from measured costs and learnt
  acceptance; "adl": `lattice_draft` with DiffuSpec's adaptive draft length. The names of
  `DynaSpecGenerationConfig.draft_plan`.
- `lattice_draft`: what a fixed or ADL round drafts: "chain", "cps", "tree" (default) or "choices".
- `num_assistant_tokens`: chain length / tree depth cap (transformers' name); None: every head.
- `prompt_lookup_num_tokens`: under "auto", a prompt-lookup draft of up to this many tokens competes.
- `tree_top_k`, `tree_total_tokens`: children per node and draft nodes of a lattice tree (the EAGLE tree's names).
- `shortlist`: "full" or "frspec" (score the heads' stored frequency list only).
- `max_candidates`, `coverage`, `cps_lambda`, `cps_beam`, `ngram_order`: DiffuSpec's causal path search;
  `adl_rho`, `adl_delta`: its adaptive draft length.
- `medusa_choices`: Medusa's static sparse tree (with `lattice_draft="choices"`).

The early per-call spellings (`medusa_draft`, `medusa_tokens`, `medusa_<option>`, `medusa_adaptive_length`) are
read through `DEPRECATED_SPELLINGS`, with one FutureWarning per spelling and process. A round reads the config
itself, as an EAGLE round reads its `DynaSpecGenerationConfig`: a call with overrides gets a checked copy
(`with_options`).
"""

from __future__ import annotations

import warnings
from typing import Any

from hf_dynaspec.modeling.options import DRAFT_PLANS, DraftingConfig, is_int, is_number

LATTICE_DRAFTS = ("chain", "cps", "tree", "choices")
LATTICE_SHORTLISTS = ("full", "frspec")


# generation_config.json's options and their defaults.
OPTION_DEFAULTS: dict[str, Any] = {
    "draft_plan": "fixed",
    "lattice_draft": "tree",
    "num_assistant_tokens": None,
    "prompt_lookup_num_tokens": 0,
    "tree_top_k": 4,
    "tree_total_tokens": 16,
    "shortlist": "full",
    "max_candidates": 15,
    "coverage": 0.8,
    "cps_lambda": 0.5,
    "cps_beam": 4,
    "ngram_order": 3,
    "adl_rho": 0.5,
    "adl_delta": 1,
    "medusa_choices": None,
}
# medusa_generate's early keyword arguments -> the option each sets now. medusa_draft="auto" sets draft_plan="auto";
# medusa_adaptive_length sets draft_plan ("adl", or False: not "adl"); medusa_shortlist=True is shortlist="frspec".
DEPRECATED_SPELLINGS = {
    "medusa_draft": "lattice_draft", "medusa_tokens": "num_assistant_tokens", "medusa_adaptive_length": "draft_plan",
    "medusa_prompt_lookup_num_tokens": "prompt_lookup_num_tokens", "medusa_shortlist": "shortlist",
    **{f"medusa_{name}": name for name in ("tree_top_k", "tree_total_tokens", "max_candidates", "coverage",
                                           "cps_lambda", "cps_beam", "ngram_order", "adl_rho", "adl_delta")},
}
CALL_OPTIONS = (*OPTION_DEFAULTS, *DEPRECATED_SPELLINGS)  # every keyword argument the lattice route reads
_warned: set[str] = set()  # the deprecated spellings already warned about in this process


def current_spelling(name: str, value, configured_plan: str) -> tuple[str, Any]:
    """A call's `name=value` under the option's name now (warning once per deprecated spelling)."""
    if name not in DEPRECATED_SPELLINGS:
        if name not in OPTION_DEFAULTS:
            raise TypeError(f"unknown Medusa drafting option {name!r}; the options are {sorted(OPTION_DEFAULTS)}")
        return name, value
    option = DEPRECATED_SPELLINGS[name]
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"the Medusa option {name!r} is now the option {option!r} (MedusaGenerationConfig; "
                      "hf_dynaspec.modeling.medusa_options lists them); the old spelling goes in hf-dynaspec 0.2.",
                      FutureWarning, stacklevel=4)
    if name == "medusa_draft" and value == "auto":
        return "draft_plan", "auto"
    if name == "medusa_adaptive_length":
        return option, "adl" if value else ("fixed" if configured_plan == "adl" else configured_plan)
    if name == "medusa_shortlist" and isinstance(value, bool):
        return option, "frspec" if value else "full"
    return option, value


class MedusaGenerationConfig(DraftingConfig):
    """Drafting options of `MedusaAssistant` heads (`heads.generation_config`, generation_config.json); the table
    in this module's docstring says what each does. Checked on construction and again when a call starts."""

    option_defaults = OPTION_DEFAULTS

    def validate_options(self) -> None:
        """Raise `ValueError` naming the bad option and the fix."""
        self._require(self.draft_plan in DRAFT_PLANS, "draft_plan", f"one of {DRAFT_PLANS}")
        self._require(self.lattice_draft in LATTICE_DRAFTS, "lattice_draft",
                      f"one of {LATTICE_DRAFTS} (for planned rounds: draft_plan='auto')")
        self._require(self.shortlist in LATTICE_SHORTLISTS, "shortlist", f"one of {LATTICE_SHORTLISTS}")
        if self.lattice_kind == "choices" and not self.medusa_choices:
            raise ValueError("lattice_draft='choices' needs medusa_choices (e.g. [(0,), (1,), (0, 0)]): per-position "
                             "ranks")
        for name in ("tree_top_k", "tree_total_tokens", "max_candidates", "cps_beam", "ngram_order"):
            self._require(is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "an integer >= 1")
        lookup, tokens = self.prompt_lookup_num_tokens, self.num_assistant_tokens
        self._require(is_int(lookup) and lookup >= 0, "prompt_lookup_num_tokens", "an integer >= 0 (0: off)")
        self._require(tokens is None or (is_int(tokens) and tokens >= 0), "num_assistant_tokens",
                      "None (every head) or an integer >= 0")
        self._require(is_number(self.coverage) and 0.0 < self.coverage <= 1.0, "coverage", "in (0, 1]")
        self._require(is_number(self.cps_lambda) and 0.0 <= self.cps_lambda <= 1.0, "cps_lambda", "in [0, 1]")

    def with_options(self, **overrides) -> MedusaGenerationConfig:
        """A checked copy with `overrides` (speculative_generate's keyword arguments, current or deprecated
        spellings; None values are ignored) applied."""
        given: dict[str, tuple[str, Any]] = {}  # option -> (the spelling that set it, its value)
        for name, value in overrides.items():
            if value is None:
                continue
            option, value = current_spelling(name, value, self.draft_plan)
            if option in given and given[option][1] != value:
                raise ValueError(f"this call sets {option} twice ({given[option][0]} and {name} ask for "
                                 f"{given[option][1]!r} and {value!r}): pass one")
            given[option] = (name, value)
        values = self.drafting_options()
        values.update({option: value for option, (_, value) in given.items()})
        return MedusaGenerationConfig(**values)

    # -- what a round reads ---------------------------------------------------------------------------------------
    @property
    def lattice_kind(self) -> str:
        """The round kind: "auto" (planned), else `lattice_draft`."""
        return "auto" if self.draft_plan == "auto" else self.lattice_draft

    @property
    def shortlisted(self) -> bool:
        """The heads score their stored FR-Spec list only."""
        return self.shortlist == "frspec"

    @property
    def uses_context(self) -> bool:
        """The round's choice reads an n-gram model of the context (CPS, or a tree scored with it)."""
        return self.lattice_kind == "cps" or (self.lattice_kind in ("tree", "auto") and self.cps_lambda < 1.0)
