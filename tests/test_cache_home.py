"""One cache directory for everything hf-dynaspec keeps (models, measured costs, the compiled kernel), found as
the Hugging Face ecosystem finds its own: its own variable first, then HF_HOME, then XDG_CACHE_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_dynaspec.cache_home import home_dir
from hf_dynaspec.generation.costs.store import calibration_path
from hf_dynaspec.kernels.verify_rows.loader import cached_library_path
from hf_dynaspec.zoo import cache_root


@pytest.mark.parametrize("variables, expected", [
    ({"HF_DYNASPEC_HOME": "/a", "HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/a"),
    ({"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/b/dynaspec"),
    ({"XDG_CACHE_HOME": "/c"}, "/c/hf-dynaspec"),
    ({}, str(Path.home() / ".cache" / "hf-dynaspec")),
])
def test_one_cache_root_for_models_costs_and_kernels(monkeypatch, variables, expected):
    for name in ("HF_DYNASPEC_HOME", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    root = Path(expected)
    assert home_dir() == root
    assert calibration_path() == root / "calibration.json"
    assert cache_root() == root / "models"
    assert cached_library_path("cc").parent == root / "kernels"
