"""hf-dynaspec: lossless speculative decoding for Hugging Face causal LMs (EAGLE drafters + DynaSpec, Medusa heads).

Importing the package installs the `generate(assistant_model=...)` route (hf_dynaspec.generation.hook).
`speculative_generate` is the one `custom_generate` entry; the names of earlier releases (`chain_generate`,
`tree_generate`, `medusa_generate`, `lattice_generate`) still import from here, as deprecated aliases
(hf_dynaspec.generation.aliases).
"""

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.drafting.runtime import suffix_cache
from hf_dynaspec.errors import ArtifactError, AssistantMismatchError, UnsupportedTargetError
from hf_dynaspec.exactness import check_exactness, first_divergence
from hf_dynaspec.generation import speculative_generate
from hf_dynaspec.generation.costs.verify_kernel import fast_cpu
from hf_dynaspec.modeling.assistant import DynaSpecAssistant
from hf_dynaspec.modeling.config import DynaSpecConfig
from hf_dynaspec.modeling.medusa import MedusaAssistant, MedusaConfig
from hf_dynaspec.modeling.options import DynaSpecGenerationConfig
from hf_dynaspec.stats import DraftStats
from hf_dynaspec.version import __version__

__all__ = [
    "ArtifactError",
    "AssistantMismatchError",
    "DiffusionDrafter",
    "DraftStats",
    "DynaSpecAssistant",
    "DynaSpecConfig",
    "DynaSpecGenerationConfig",
    "MedusaAssistant",
    "MedusaConfig",
    "UnsupportedTargetError",
    "__version__",
    "check_exactness",
    "fast_cpu",
    "first_divergence",
    "speculative_generate",
    "suffix_cache",
]

_ALIASES = ("chain_generate", "tree_generate", "medusa_generate", "lattice_generate")


def __getattr__(name: str):
    """The deprecated `custom_generate` names, from hf_dynaspec.generation.aliases (each warns when called)."""
    if name in _ALIASES:
        from hf_dynaspec.generation import aliases

        return getattr(aliases, name)
    raise AttributeError(f"module 'hf_dynaspec' has no attribute {name!r}")
