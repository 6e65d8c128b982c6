"""hf-dynaspec: lossless speculative decoding for Hugging Face causal LMs (EAGLE drafters + DynaSpec)."""

__version__ = "0.1.0"

from hf_dynaspec.assistant import AssistantMismatchError, DynaSpecAssistant  # noqa: E402
from hf_dynaspec.checkpoints import ArtifactError  # noqa: E402
from hf_dynaspec.config import DynaSpecConfig  # noqa: E402
from hf_dynaspec.exactness import Divergence, check_exactness, first_divergence  # noqa: E402
from hf_dynaspec.families import UnsupportedTargetError  # noqa: E402
from hf_dynaspec.stats import DraftStats  # noqa: E402
from hf_dynaspec.tree import tree_generate  # noqa: E402

__all__ = [
    "ArtifactError",
    "AssistantMismatchError",
    "Divergence",
    "DraftStats",
    "DynaSpecAssistant",
    "DynaSpecConfig",
    "UnsupportedTargetError",
    "check_exactness",
    "first_divergence",
    "tree_generate",
    "__version__",
]
