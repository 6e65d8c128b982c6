"""Where the workplace's shared data lives: `../shared/data` next to the checkout (the documented layout), or
wherever `HF_DYNASPEC_SHARED_DATA` points (CI may clone the repository elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "data",  # ../shared/data beside the checkout
    Path("/work/shared/data"),  # the workplace's fixed location, for clones made elsewhere (e.g. CI)
)


def shared_data_dir() -> Path:
    """The `shared/data` directory (with `train/` and `eval/`); a clear error when it cannot be found."""
    configured = os.environ.get("HF_DYNASPEC_SHARED_DATA")
    candidates = (Path(configured),) if configured else _CANDIDATES
    for candidate in candidates:
        if (candidate / "train").is_dir():
            return candidate
    raise FileNotFoundError(
        "the shared training/evaluation data was not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Pass your own data with --data FILE_OR_DATASET (recipes/user_data.py), or set HF_DYNASPEC_SHARED_DATA "
        "to the directory that holds train/ and eval/"
    )
