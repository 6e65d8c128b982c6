"""Decoding methods the benchmark compares, each named by a string `name[:arg]` (e.g. `frspec:32768`).

Every method is greedy `model.generate()` with different keyword arguments: transformers' own assisted
generation (`hf-assisted`, a separate draft model) and prompt lookup, or a DynaSpecAssistant configured with
one shortlist strategy. DynaSpec methods each get their own assistant object (sharing nothing mutable), so
that switching between methods never rebuilds a head.

Several assistants (e.g. two versions of a drafter) can run in one interleaved benchmark: each gets a label, and
an assistant method is then keyed `LABEL/method` (`v7/dynaspec:8+lookup:5`); `expand_assistant_labels` turns an
unlabelled assistant method into one method per assistant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hf_dynaspec.generation import speculative_generate
from hf_dynaspec.generation.costs.verify_kernel import fast_cpu
from hf_dynaspec.modeling.assistant import DynaSpecAssistant

DEFAULT_LOOKUP_TOKENS = 7  # 8 rows per verification pass: one sweep of the CPU kernel (cpu_verify)
DEFAULT_SUFFIX_TOKENS = 16
DEFAULT_AUTO_MAX = 8

# name -> (what the argument means, default argument or None when required / not taken)
METHOD_HELP = {
    "vanilla": "plain greedy generate()",
    "vanilla-fast": "plain greedy generate() on the fastest CPU kernels measured here, its one-token steps compiled "
                    "(hf_dynaspec.fast_cpu)",
    "hf-assisted": "transformers' assisted generation with --draft-model",
    "llama.cpp:GGUF": "llama.cpp's greedy decoding of the same prompt ids on the GGUF file GGUF (llama-cpp-python; "
                      "a bf16 GGUF is the same weights, a quantized one another model); the path takes no '+' or '@'",
    "prompt-lookup[:N]": "transformers' prompt lookup decoding, N tokens per lookup (default 10)",
    "drafter-free": "DynaSpecAssistant.for_target(model): prompt lookup and the suffix cache, each round planned from "
                    "this machine's costs; no artifact",
    "eagle": "the assistant with its full-vocabulary head",
    "frspec:SIZE": "the assistant with FR-Spec's SIZE most frequent tokens",
    "vocabtrim:SIZE": "the assistant with VocabTrim's SIZE most drafted tokens",
    "dynaspec-fixed:K": "DynaSpec with K clusters at every draft position",
    "dynaspec[:KMAX]": "DynaSpec, the artifact's row budget per draft position (KMAX: KMAX clusters' worth of rows "
                       "at position 0, then the paper's k(t) schedule; rows=R0xR1x...: those rows per position)",
    "eagle-tree": "EAGLE-2 draft trees with the full-vocabulary head (tree verification)",
    "dynaspec-tree[:KMAX]": "EAGLE-2 draft trees through DynaSpec shortlists, budget per tree depth",
    "...@P": "chain methods of the assistant (eagle ... dynaspec): draft_confidence P, e.g. dynaspec:8@0.6",
    "...+lookup[:N]": "chain methods of the assistant: prompt lookup first, up to N tokens (default "
                      f"{DEFAULT_LOOKUP_TOKENS}), the drafter when it finds nothing, e.g. dynaspec:8+lookup:5",
    "...+veto[:P]": "with +lookup: the drafter overrules a lookup draft when its own top first token differs "
                    "with probability above P (default 0: any disagreement), e.g. dynaspec:8+lookup:5+veto:0.3",
    "...+draft:K": "chain methods of the assistant: K draft tokens per round for this method (default: "
                   "--num-draft-tokens, else the artifact's), e.g. dynaspec:8+lookup:5+draft:3",
    "...+suffix[:N]": "chain methods of the assistant: the suffix cache drafts up to N tokens (default "
                      f"{DEFAULT_SUFFIX_TOKENS}), e.g. dynaspec:8+suffix",
    "...+block": "chain methods of the assistant: sampled drafts verified as a block (verification='block'), e.g. "
                  "dynaspec+lookup:5+suffix+auto+block",
    "...+adl": "chain methods of the assistant: draft_plan='adl' (DiffuSpec's adaptive draft length, 1..K), e.g. "
                "dynaspec:8+draft:6+adl",
    "...+auto[:KMAX]": "chain methods of the assistant: draft_plan='auto' (each round planned from measured costs, "
                       "chains up to KMAX, default 8), e.g. dynaspec:8+lookup:10+suffix+auto; without it 'fixed'",
    "...+tree:TOPKxDEPTHxTOTAL": "tree methods: this tree shape (default: --tree, else the artifact's), e.g. "
                                 "dynaspec-tree:8+tree:4x4x8",
    "...-tree+auto[:KMAX]": "tree methods: each round planned among trees of the shape cut to any depth, chains up "
                            "to KMAX and, with +lookup / +suffix, lookup drafts, e.g. dynaspec-tree+lookup:5+suffix+auto",
    "medusa[:K]": "Medusa heads (--medusa PATH): each head's argmax, a chain of K tokens (default: every head)",
    "medusa-tree[:TOTAL]": "Medusa heads: the TOTAL best nodes of the lattice's prefix tree (default 16)",
    "medusa-auto[:TOTAL]": "Medusa heads, draft_plan='auto': each round planned from measured costs among chain "
                           "lengths, lattice trees of up to TOTAL nodes (default 16) and no draft",
    "medusa-auto...+lookup[:N]": "medusa-auto: a prompt-lookup draft of up to N tokens (default 10) competes",
    "medusa...+cps[:LAMBDA]": "Medusa methods: DiffuSpec's causal path search, lattice weight LAMBDA (default 0.5) "
                              "against an n-gram model of the context",
    "medusa...+adl": "Medusa chain and tree methods: DiffuSpec's adaptive draft length",
    "medusa...+shortlist": "Medusa methods: heads score only the FR-Spec list stored with them",
    "LABEL/...": "with several --assistant LABEL=PATH: the assistant's methods of that one assistant; an "
                 "unlabelled assistant method runs once per assistant",
}
ASSISTANT_METHODS = ("eagle", "frspec", "vocabtrim", "dynaspec-fixed", "dynaspec", "eagle-tree", "dynaspec-tree")


@dataclass
class Method:
    key: str  # exactly as the user wrote it
    generate_kwargs: dict = field(default_factory=dict)
    assistant: DynaSpecAssistant | None = None
    context: Callable | None = None  # context(target) -> a context manager around each generate() call
    # Another engine instead of generate(): run(input_ids, max_new_tokens) -> (new ids, seconds to the first token)
    run: Callable | None = None
    weight_format: str | None = None  # what `run` decodes with, where that is not the target's own weights

    def stats(self) -> dict:
        """The assistant's statistics of the last generate() call ({} for methods without our assistant)."""
        return self.assistant.stats.as_dict() if self.assistant is not None else {}


def split_label(key: str) -> tuple[str | None, str]:
    """`LABEL/method` -> (LABEL, method); a key without a label -> (None, key)."""
    if key.startswith("llama.cpp:"):  # its argument is a path: its slashes are not a label's
        return None, key
    label, slash, rest = key.partition("/")
    return (label.strip(), rest.strip()) if slash else (None, key)


def parse_method(key: str) -> tuple[str, str | None]:
    """`[LABEL/]name[:arg][@P][+lookup[:N]][+veto[:P]][+draft:K]` -> (name, arg); the suffixes are read by
    `parse_confidence` and `parse_plus_suffixes`, the label by `split_label`."""
    name, _, arg = split_label(key)[1].partition("+")[0].partition("@")[0].partition(":")
    return name.strip(), (arg.strip() or None)


def expand_assistant_labels(keys: list[str], labels: list[str]) -> list[str]:
    """With labelled assistants, every unlabelled assistant method becomes one `LABEL/method` per label, in the
    order of `labels`; other keys are kept. `labels == []` (one unlabelled assistant) changes nothing."""
    if not labels:
        return list(keys)
    expanded = []
    for key in keys:
        if split_label(key)[0] is None and parse_method(key)[0] in ASSISTANT_METHODS:
            expanded += [f"{label}/{key}" for label in labels]
        else:
            expanded.append(key)
    return expanded


def parse_plus_suffixes(key: str) -> dict:
    """The `+lookup[:N]`, `+veto[:P]`, `+draft:K`, `+suffix[:N]`, `+auto[:KMAX]` and `+tree:AxBxC` suffixes of a
    method key, as assistant overrides (each present only when its suffix is)."""
    head, *suffixes = split_label(key)[1].split("+")
    overrides = {}
    readers = {
        "lookup": ("prompt_lookup_num_tokens", lambda arg: _positive_int(key, arg, DEFAULT_LOOKUP_TOKENS)),
        "veto": ("prompt_lookup_veto", lambda arg: _probability(key, arg)),
        "draft": ("num_assistant_tokens", lambda arg: _draft_length(key, head, arg)),
        "suffix": ("suffix_cache_num_tokens", lambda arg: _positive_int(key, arg, DEFAULT_SUFFIX_TOKENS)),
        "auto": ("auto_max_assistant_tokens", lambda arg: _positive_int(key, arg, DEFAULT_AUTO_MAX)),
        "tree": ("tree_shape", lambda arg: _tree_shape(key, arg)),
        "adl": ("adaptive_length", lambda arg: True),
        "block": ("verification", lambda arg: _no_argument(key, "block", arg, "block")),
    }
    for suffix in suffixes:
        name, _, arg = suffix.partition(":")
        name, arg = name.strip(), arg.strip() or None
        if name not in readers or readers[name][0] in overrides:
            raise ValueError(f"method {key!r}: the + suffixes are +lookup[:N], +veto[:P], +draft:K, +suffix[:N], "
                             f"+auto[:KMAX], +adl, +block and +tree:AxBxC, each at most once, e.g. "
                             f"{head}+lookup:5+draft:3")
        option, read = readers[name]
        overrides[option] = read(arg)
    if "prompt_lookup_veto" in overrides and "prompt_lookup_num_tokens" not in overrides:
        raise ValueError(f"method {key!r}: +veto checks lookup drafts, so it needs +lookup, e.g. {head}+lookup:5+veto")
    return overrides


def _no_argument(key: str, name: str, arg: str | None, value):
    if arg is not None:
        raise ValueError(f"method {key!r}: +{name} takes no argument")
    return value


def _draft_length(key: str, head: str, arg: str | None) -> int:
    if arg is None:
        raise ValueError(f"method {key!r}: +draft needs the number of draft tokens, e.g. {head}+draft:3")
    return _positive_int(key, arg)


def _tree_shape(key: str, arg: str | None) -> tuple[int, int, int]:
    try:
        shape = tuple(int(part) for part in (arg or "").split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"method {key!r}: +tree:TOPKxDEPTHxTOTAL takes three positive integers, e.g. +tree:4x4x8")
    return shape


def _probability(key: str, arg: str | None) -> float:
    """A `+veto[:P]` argument: a probability in [0, 1), 0 when absent."""
    try:
        value = 0.0 if arg is None else float(arg)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise ValueError(f"method {key!r}: +veto:P takes a probability in [0, 1), e.g. +veto:0.3")
    return value


def parse_confidence(key: str) -> float | None:
    """The `@P` suffix of a method key: the assistant's draft_confidence (None when absent)."""
    head, at, value = split_label(key)[1].partition("+")[0].partition("@")
    if not at:
        return None
    try:
        confidence = float(value)
    except ValueError:
        confidence = -1.0
    if not 0.0 <= confidence < 1.0:
        raise ValueError(f"method {key!r}: the @ suffix is a draft confidence in [0, 1), e.g. {head}@0.5")
    return confidence


def _positive_int(key: str, arg: str | None, default: int | None = None) -> int:
    if arg is None:
        if default is None:
            raise ValueError(f"method {key!r} needs an argument, e.g. {key.split(':')[0]}:16384")
        return default
    try:
        value = int(arg)
    except ValueError:
        raise ValueError(f"method {key!r}: the argument must be a positive integer") from None
    if value <= 0:
        raise ValueError(f"method {key!r}: the argument must be a positive integer")
    return value


def shortlist_overrides(name: str, arg: str | None, key: str) -> dict:
    """The shortlist options an assistant method selects: `parse_method("frspec:4096")` -> ("frspec", "4096") ->
    {"shortlist": "frspec", "shortlist_size": 4096}; `key` names the method in errors."""
    return {
        "eagle": lambda: {"shortlist": "full"},
        "frspec": lambda: {"shortlist": "frspec", "shortlist_size": _positive_int(key, arg)},
        "vocabtrim": lambda: {"shortlist": "vocabtrim", "shortlist_size": _positive_int(key, arg)},
        "dynaspec-fixed": lambda: {"shortlist": "dynaspec-fixed", "shortlist_rows": "clusters",
                                   "fixed_clusters": _positive_int(key, arg)},
        "dynaspec": lambda: {"shortlist": "dynaspec", **_dynaspec_budget(key, arg)},
        "eagle-tree": lambda: {"shortlist": "full"},
        "dynaspec-tree": lambda: {"shortlist": "dynaspec", **_dynaspec_budget(key, arg)},
    }[name]()


def _dynaspec_budget(key: str, arg: str | None) -> dict:
    """`dynaspec`: the artifact's row budget; `dynaspec:KMAX`: KMAX clusters' worth of rows (the k(t) schedule);
    `dynaspec:rows=R0xR1x...`: those rows per draft position."""
    if arg is None:
        return {}
    if arg.startswith("rows="):
        return {"shortlist_rows": [_positive_int(key, part) for part in arg[len("rows="):].split("x")]}
    return {"shortlist_rows": "clusters", "max_clusters": _positive_int(key, arg)}


def build_methods(
    keys: list[str],
    *,
    assistant_factory: Callable[..., DynaSpecAssistant] | None = None,
    labelled_factories: dict[str, Callable[..., DynaSpecAssistant]] | None = None,
    draft_model=None,
    medusa_heads=None,
    target=None,
) -> list[Method]:
    """Methods for `keys`. `assistant_factory(**overrides)` loads a fresh assistant attached to the target
    (overrides as in `DynaSpecAssistant.from_pretrained`); `labelled_factories` holds one such factory per
    label, for keys `LABEL/method` (pass the keys through `expand_assistant_labels` first); `draft_model` serves
    `hf-assisted`, `medusa_heads` (a MedusaAssistant) the medusa methods, `target` drafter-free."""
    if len(set(keys)) != len(keys):
        raise ValueError(f"a method is listed twice in {keys}")
    methods = []
    for key in keys:
        name, arg = parse_method(key)
        label = split_label(key)[0]
        if label is not None and name not in ASSISTANT_METHODS:
            raise ValueError(f"method {key!r}: a LABEL/ prefix picks an assistant, so it applies to the "
                             "assistant's methods only")
        if labelled_factories and name in ASSISTANT_METHODS and label is None:
            raise ValueError(f"method {key!r}: several assistants are labelled ({', '.join(labelled_factories)}): "
                             f"write LABEL/{key}, or pass the keys through expand_assistant_labels")
        factory = assistant_factory
        if label is not None:
            if not labelled_factories or label not in labelled_factories:
                known = ", ".join(labelled_factories or []) or "none: pass --assistant LABEL=PATH"
                raise ValueError(f"method {key!r}: no assistant is labelled {label!r} (labels: {known})")
            factory = labelled_factories[label]
        if ("@" in key or "+" in key or arg) and name == "drafter-free":
            raise ValueError(f"method {key!r}: drafter-free takes no argument or suffix")
        if ("@" in key or "+" in key) and name in ("vanilla", "vanilla-fast", "hf-assisted", "prompt-lookup"):
            raise ValueError(f"method {key!r}: the @P, +lookup and +draft suffixes apply to the assistant's "
                             "methods only")
        if name == "llama.cpp":
            methods.append(_llama_cpp_method(key, arg, target))
        elif name == "vanilla":
            methods.append(Method(key))
        elif name == "vanilla-fast":
            methods.append(Method(key, context=fast_cpu))
        elif name == "hf-assisted":
            if draft_model is None:
                raise ValueError("method 'hf-assisted' needs a draft model: pass --draft-model NAME_OR_PATH")
            methods.append(Method(key, {"assistant_model": draft_model}))
        elif name == "drafter-free":
            assistant = DynaSpecAssistant.for_target(target)
            methods.append(Method(key, {"assistant_model": assistant}, assistant))
        elif name == "prompt-lookup":
            methods.append(Method(key, {"prompt_lookup_num_tokens": _positive_int(key, arg, 10)}))
        elif name in ("medusa", "medusa-tree", "medusa-auto"):
            if medusa_heads is None:
                raise ValueError(f"method {key!r} needs Medusa heads: pass --medusa PATH")
            methods.append(Method(key, medusa_kwargs(key, name, arg, medusa_heads), medusa_heads))
        elif name in ASSISTANT_METHODS:
            if factory is None:
                raise ValueError(f"method {key!r} needs an assistant: pass --assistant PATH")
            methods.append(_assistant_method(key, name, arg, factory))
        else:
            known = ", ".join(METHOD_HELP)
            raise ValueError(f"unknown method {key!r}; known methods: {known}")
    return methods


def _assistant_method(key: str, name: str, arg: str | None, factory) -> Method:
    """An assistant method: its shortlist and suffixes as overrides of the artifact's options."""
    overrides = shortlist_overrides(name, arg, key)
    if name in ("eagle", "eagle-tree") and arg is not None:
        raise ValueError(f"method {key!r}: {name!r} takes no argument")
    confidence = parse_confidence(key)
    plus = parse_plus_suffixes(key)
    tree = name.endswith("-tree")
    if tree and confidence is not None:
        raise ValueError(f"method {key!r}: a draft confidence applies to chain drafting, not trees")
    if tree and "verification" in plus:
        raise ValueError(f"method {key!r}: +block verifies a sampled chain; trees have their own sampled rule")
    planned_tree = {"tree_shape", "auto_max_assistant_tokens", "prompt_lookup_num_tokens", "suffix_cache_num_tokens"}
    if tree and plus.keys() - (planned_tree if "auto_max_assistant_tokens" in plus else {"tree_shape"}):
        raise ValueError(f"method {key!r}: tree methods take +tree:TOPKxDEPTHxTOTAL, and +auto[:KMAX] with "
                         "+lookup[:N] and +suffix[:N] (a planned round: trees, chains up to KMAX, lookups); +veto "
                         "and +draft apply to chain drafting")
    if not tree and "tree_shape" in plus:
        raise ValueError(f"method {key!r}: +tree sets a tree's shape; use it with eagle-tree or dynaspec-tree")
    # The key describes the whole method: without a suffix its feature is off, whatever default the artifact's
    # config carries (a shipped config may turn prompt lookup on; the default plan is "auto"). The draft length is
    # not a feature: without +draft it is the run's (--num-draft-tokens) or the artifact's; nor is how sampled
    # drafts are verified: without +block, the artifact's `verification`.
    overrides["assistant_confidence_threshold"] = confidence or 0.0
    overrides["prompt_lookup_num_tokens"] = plus.get("prompt_lookup_num_tokens", 0)
    overrides["prompt_lookup_veto"] = plus.get("prompt_lookup_veto", 1.0)
    overrides["suffix_cache_num_tokens"] = plus.get("suffix_cache_num_tokens", 0)
    if plus.get("adaptive_length") and ("auto_max_assistant_tokens" in plus or tree):
        raise ValueError(f"method {key!r}: +adl adapts a chain's fixed length; it does not combine with +auto or "
                         "tree methods")
    overrides["draft_plan"] = ("auto" if "auto_max_assistant_tokens" in plus
                               else "adl" if plus.get("adaptive_length") else "fixed")
    for option in ("num_assistant_tokens", "auto_max_assistant_tokens", "verification"):
        if option in plus:
            overrides[option] = plus[option]
    if "tree_shape" in plus:
        overrides.update(zip(("tree_top_k", "tree_depth", "tree_total_tokens"), plus["tree_shape"]))
    assistant = factory(**overrides)
    if tree:
        return Method(key, {"custom_generate": speculative_generate, "drafter": assistant, "trees": True}, assistant)
    return Method(key, {"assistant_model": assistant}, assistant)


def eos_ids(target) -> set[int]:
    """The ids that end the target's generate() (its generation config's `eos_token_id`: one, a list, or none)."""
    eos = target.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [] if eos is None else [eos])


def _llama_cpp_method(key: str, gguf: str | None, target) -> Method:
    """`llama.cpp:GGUF`: the reference engine on that file, stopping where the target's generate() would."""
    from hf_dynaspec.bench.llama_cpp import LlamaCpp, missing

    lacking = missing(gguf)
    if lacking is not None:
        raise ValueError(f"method {key!r}: {lacking}")
    engine = LlamaCpp(gguf, eos_ids(target) if target is not None else set())
    return Method(key, run=engine, weight_format=engine.weight_format)


def medusa_kwargs(key: str, name: str, arg: str | None, heads) -> dict:
    """generate() arguments of a medusa method: `medusa[:K]` / `medusa-tree[:TOTAL]` / `medusa-auto[:TOTAL]` with
    `+cps[:LAMBDA]`, `+adl` (not auto), `+shortlist`, `+lookup[:N]` (auto)."""
    kwargs = {"custom_generate": speculative_generate, "drafter": heads}
    if name == "medusa":
        kwargs["lattice_draft"] = "chain"
        if arg is not None:
            kwargs["num_assistant_tokens"] = _positive_int(key, arg)
    else:
        drafting = {"draft_plan": "auto"} if name == "medusa-auto" else {"lattice_draft": "tree"}
        kwargs.update(drafting, cps_lambda=1.0, tree_total_tokens=_positive_int(key, arg, 16))
    for suffix in split_label(key)[1].split("+")[1:]:
        option, _, value = suffix.partition(":")
        if option == "cps":
            lam = 0.5 if not value else float(value)
            if not 0.0 <= lam < 1.0:
                raise ValueError(f"method {key!r}: +cps:LAMBDA takes a weight in [0, 1), e.g. +cps:0.5")
            kwargs["cps_lambda"] = lam
            if name == "medusa":
                kwargs["lattice_draft"] = "cps"
        elif option == "adl" and not value and name != "medusa-auto":
            kwargs["draft_plan"] = "adl"
        elif option == "shortlist" and not value:
            kwargs["shortlist"] = "frspec"
        elif option == "lookup" and name == "medusa-auto":
            kwargs["prompt_lookup_num_tokens"] = _positive_int(key, value or None, 10)
        else:
            raise ValueError(f"method {key!r}: medusa methods take +cps[:LAMBDA], +adl (chain and tree), +shortlist "
                             "and, for medusa-auto, +lookup[:N]")
    return kwargs
