"""hf-dynaspec's one cache directory, for everything it keeps between runs: measured costs (calibration.json), the
compiled CPU kernel (kernels/) and the offline model zoo (models/).

`$HF_DYNASPEC_HOME` when set; else `$HF_HOME/dynaspec` (beside the Hub's own cache, as accelerate keeps its
config under `$HF_HOME`); else `$XDG_CACHE_HOME/hf-dynaspec`; else `~/.cache/hf-dynaspec`. A leaf module, so
that every layer can find the cache without importing another.
"""

from __future__ import annotations

import os
from pathlib import Path


def home_dir() -> Path:
    """The cache directory (not created here)."""
    if os.environ.get("HF_DYNASPEC_HOME"):
        return Path(os.environ["HF_DYNASPEC_HOME"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "dynaspec"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "hf-dynaspec"
    return Path.home() / ".cache" / "hf-dynaspec"
