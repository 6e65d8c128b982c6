"""How Medusa heads (or any lattice source) draft: `MedusaGenerationConfig`, saved with the heads as
generation_config.json, as a `DynaSpecAssistant` saves its `DynaSpecGenerationConfig`; `medusa_generate`'s
keyword arguments override it per call.

Each option, its keyword argument, what it does:

- `draft_plan` (`draft_plan`): "fixed" (default): `lattice_draft` every round; "auto": planned from measured
  costs and learnt acceptance; "adl": `lattice_draft` with DiffuSpec's adaptive draft length. The names of
  `DynaSpecGenerationConfig.draft_plan`.
- `lattice_draft` (`medusa_draft`): what a fixed or ADL round drafts: "chain", "cps", "tree" (default) or
  "choices" (`medusa_draft="auto"` is accepted as `draft_plan="auto"`).
- `num_assistant_tokens` (`medusa_tokens`): chain length / tree depth cap (transformers' name); None: every head.
- `prompt_lookup_num_tokens` (`medusa_prompt_lookup_num_tokens`): under "auto", a prompt-lookup draft of up to
  this many tokens competes (transformers' name).
- `tree_top_k`, `tree_total_tokens` (`medusa_tree_top_k`, ...): children per node and draft nodes of a lattice
  tree (the EAGLE tree's names).
- `shortlist` (`medusa_shortlist`): "full" or "frspec" (the heads' stored frequency list; `True` per call).
- `max_candidates`, `coverage`, `cps_lambda`, `cps_beam`, `ngram_order` (`medusa_<name>`): DiffuSpec's causal
  path search; `adl_rho`, `adl_delta` (`medusa_<name>`): its adaptive draft length.
- `medusa_choices` (`medusa_choices`): Medusa's static sparse tree (with `lattice_draft="choices"`).

`MedusaOptions` is what a round reads: the config and the call's overrides resolved and checked once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from transformers import GenerationConfig

from hf_dynaspec.modeling.options import DRAFT_PLANS

MEDUSA_DRAFTS = ("chain", "cps", "tree", "choices", "auto")
LATTICE_SHORTLISTS = ("full", "frspec")


@dataclass
class MedusaOptions:
    """How a lattice source drafts in one call (resolved from `MedusaGenerationConfig` and the call's keyword
    arguments): `draft` is the round kind ("auto": planned), `adaptive_length` ADL."""

    draft: str = "tree"
    num_assistant_tokens: int | None = None  # chain length / tree depth cap; None: every head
    tree_top_k: int = 4  # children per node of a lattice tree
    tree_total_tokens: int = 16  # draft nodes of a lattice tree
    max_candidates: int = 15  # CPS's M_max
    coverage: float = 0.8  # CPS's tau: per position, the candidates covering this much probability
    cps_lambda: float = 0.5  # weight of the lattice's log-probability against the n-gram's
    cps_beam: int = 4
    ngram_order: int = 3
    adaptive_length: bool = False  # ADL
    adl_rho: float = 0.5
    adl_delta: int = 1
    shortlist: bool = False  # score the stored FR-Spec list only
    choices: list | None = None  # Medusa's medusa_choices: per-position candidate ranks of each node
    prompt_lookup_num_tokens: int = 0  # draft="auto": a prompt-lookup draft of up to this many tokens competes

    @classmethod
    def from_kwargs(cls, **kwargs) -> MedusaOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown Medusa drafting options {unknown}; known: {sorted(known)}")
        options = cls(**{k: v for k, v in kwargs.items() if v is not None})
        options.validate()
        return options

    def validate(self) -> None:
        if self.draft not in MEDUSA_DRAFTS:
            raise ValueError(f"medusa draft must be one of {MEDUSA_DRAFTS}; got {self.draft!r}.")
        if self.draft == "choices" and not self.choices:
            raise ValueError("draft='choices' needs medusa_choices (e.g. [(0,), (1,), (0, 0)]): per-position ranks")
        for name in ("tree_top_k", "tree_total_tokens", "max_candidates", "cps_beam", "ngram_order"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"Medusa option {name} must be >= 1; got {getattr(self, name)!r}.")
        if self.draft == "auto" and self.adaptive_length:
            raise ValueError("draft='auto' plans each round's length itself; drop adaptive_length (ADL), or pick a "
                             "fixed draft kind ('chain', 'cps', 'tree') to adapt its length with ADL")
        if int(self.prompt_lookup_num_tokens) < 0:
            raise ValueError(f"prompt_lookup_num_tokens must be >= 0; got {self.prompt_lookup_num_tokens!r}.")
        if self.num_assistant_tokens is not None and self.num_assistant_tokens < 0:
            raise ValueError(f"Medusa option num_assistant_tokens must be >= 0; got {self.num_assistant_tokens!r}.")
        if not 0.0 < self.coverage <= 1.0 or not 0.0 <= self.cps_lambda <= 1.0:
            raise ValueError(f"coverage must be in (0, 1] and cps_lambda in [0, 1]; got {self.coverage!r}, "
                             f"{self.cps_lambda!r}.")

    @property
    def uses_context(self) -> bool:
        """The round's choice reads an n-gram model of the context (CPS, or a tree scored with it)."""
        return self.draft == "cps" or (self.draft in ("tree", "auto") and self.cps_lambda < 1.0)


# generation_config.json's option -> (its default, the MedusaOptions field it sets).
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
# medusa_generate's keyword argument -> the option it overrides (draft_plan keeps its name).
KEYWORD_OPTIONS = {
    "medusa_draft": "lattice_draft", "medusa_tokens": "num_assistant_tokens",
    "medusa_prompt_lookup_num_tokens": "prompt_lookup_num_tokens", "medusa_shortlist": "shortlist",
    "medusa_choices": "medusa_choices",
    **{f"medusa_{name}": name for name in ("tree_top_k", "tree_total_tokens", "max_candidates", "coverage",
                                           "cps_lambda", "cps_beam", "ngram_order", "adl_rho", "adl_delta")},
}


class MedusaGenerationConfig(GenerationConfig):
    """Drafting options of `MedusaAssistant` heads (`heads.generation_config`, generation_config.json); the table
    in this module's docstring says what each does. Checked on construction and again when a call starts."""

    def __init__(self, **kwargs):
        values = {name: kwargs.pop(name, default) for name, default in OPTION_DEFAULTS.items()}
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        self.lattice_options()

    def drafting_options(self) -> dict[str, Any]:
        """Only the drafting options, `{name: value}`."""
        return {name: getattr(self, name) for name in OPTION_DEFAULTS}

    def lattice_options(self, **overrides) -> MedusaOptions:
        """The checked `MedusaOptions` of a call: these options with `overrides` (medusa_generate's keyword
        arguments, by their names; None values are ignored) applied."""
        values = self.drafting_options()
        plans = set()  # the plans this call asks for, in any spelling: more than one is a contradiction
        no_adl = False
        for name, value in overrides.items():
            if value is None:
                continue
            if name == "medusa_adaptive_length":  # the early spelling of draft_plan="adl" (False: not "adl")
                no_adl = not value
                if value:
                    plans.add("adl")
            elif name == "medusa_draft" and value == "auto":  # the early spelling of draft_plan="auto"
                plans.add("auto")
            elif name == "draft_plan":
                plans.add(value)
            elif name in KEYWORD_OPTIONS:
                values[KEYWORD_OPTIONS[name]] = value
            else:
                raise TypeError(f"unknown Medusa drafting option {name!r}; the options are "
                                f"{sorted([*KEYWORD_OPTIONS, 'draft_plan', 'medusa_adaptive_length'])}")
        if len(plans) > 1 and plans != {"auto", "adl"}:  # auto with ADL: MedusaOptions.validate says why not
            raise ValueError(f"this call asks for the draft plans {sorted(plans)} at once (draft_plan, "
                             "medusa_draft='auto', medusa_adaptive_length): pass one")
        both = plans == {"auto", "adl"}
        if plans:
            values["draft_plan"] = "auto" if both else plans.pop()
        elif no_adl and values["draft_plan"] == "adl":
            values["draft_plan"] = "fixed"
        return _resolved(values, adaptive_length=both or values["draft_plan"] == "adl")


def _resolved(values: dict[str, Any], adaptive_length: bool) -> MedusaOptions:
    """generation_config.json's options -> checked `MedusaOptions` (raises naming the bad option); `adaptive_length`:
    ADL asked for (with `draft_plan="auto"` too, which `MedusaOptions.validate` refuses)."""
    plan, kind, shortlist = values["draft_plan"], values["lattice_draft"], values["shortlist"]
    if plan not in DRAFT_PLANS:
        raise ValueError(f"draft_plan (MedusaGenerationConfig.draft_plan) must be one of {DRAFT_PLANS}; got {plan!r}.")
    if kind not in MEDUSA_DRAFTS[:-1]:
        raise ValueError(f"medusa_draft (MedusaGenerationConfig.lattice_draft) must be one of {MEDUSA_DRAFTS} "
                         f"('auto' is draft_plan='auto'); got {kind!r}.")
    if shortlist not in (*LATTICE_SHORTLISTS, True, False):
        raise ValueError(f"MedusaGenerationConfig.shortlist must be one of {LATTICE_SHORTLISTS}; got {shortlist!r}.")
    return MedusaOptions.from_kwargs(
        draft="auto" if plan == "auto" else kind, adaptive_length=adaptive_length,
        num_assistant_tokens=values["num_assistant_tokens"], shortlist=shortlist in ("frspec", True),
        choices=values["medusa_choices"],
        **{name: values[name] for name in ("prompt_lookup_num_tokens", "tree_top_k", "tree_total_tokens",
                                           "max_candidates", "coverage", "cps_lambda", "cps_beam", "ngram_order",
                                           "adl_rho", "adl_delta")})
