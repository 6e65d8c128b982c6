"""The shared data is found next to the checkout, at the workplace location, or where the environment says."""

from __future__ import annotations

import pytest

from recipes.data_paths import shared_data_dir


def test_environment_variable_wins_and_a_missing_directory_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "train").mkdir()
    monkeypatch.setenv("HF_DYNASPEC_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    monkeypatch.setenv("HF_DYNASPEC_SHARED_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="HF_DYNASPEC_SHARED_DATA"):
        shared_data_dir()


def test_the_workplace_data_is_found_without_configuration(monkeypatch):
    monkeypatch.delenv("HF_DYNASPEC_SHARED_DATA", raising=False)
    found = shared_data_dir()
    assert (found / "train" / "gsm8k_train.jsonl").is_file() and (found / "eval" / "humaneval_dev.jsonl").is_file()
