"""hf-dynaspec: lossless speculative decoding for Hugging Face causal LMs (EAGLE drafters + DynaSpec, Medusa heads).

Importing the package installs the `generate(assistant_model=...)` route (hf_dynaspec.generation.hook).
"""

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.drafting.runtime import suffix_cache
from hf_dynaspec.errors import ArtifactError, AssistantMismatchError, UnsupportedTargetError
from hf_dynaspec.exactness import Divergence, check_exactness, first_divergence
from hf_dynaspec.generation import (
    chain_generate,
    lattice_generate,
    medusa_generate,
    speculative_generate,
    tree_generate,
)
from hf_dynaspec.generation.costs.verify_kernel import FastCPU, fast_cpu
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
    "Divergence",
    "DraftStats",
    "DynaSpecAssistant",
    "DynaSpecConfig",
    "DynaSpecGenerationConfig",
    "FastCPU",
    "MedusaAssistant",
    "MedusaConfig",
    "UnsupportedTargetError",
    "__version__",
    "chain_generate",
    "check_exactness",
    "fast_cpu",
    "first_divergence",
    "lattice_generate",
    "medusa_generate",
    "speculative_generate",
    "suffix_cache",
    "tree_generate",
]
