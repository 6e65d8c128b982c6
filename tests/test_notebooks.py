"""The notebooks execute top to bottom (nbclient) on CPU against the offline zoo's Qwen2.5-Coder-0.5B, with this
repository's ../shared data out of reach (HF_DYNASPEC_SHARED_DATA names an empty directory): the training notebook
brings its own data (the package's starter prompts, answered by the target)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from hf_dynaspec import zoo

pytestmark = pytest.mark.real_model
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TARGET = "qwen2.5-coder-0.5b-instruct"


@pytest.mark.parametrize("name", ["quickstart.ipynb", "train_your_assistant.ipynb"])
def test_notebook_runs(name, tmp_path, monkeypatch):
    if zoo.cached_path(TARGET) is None:
        pytest.fail(f"{TARGET} is not cached: run `hf-dynaspec models fetch {TARGET}` first (.ci/run does).")
    monkeypatch.setenv("HF_DYNASPEC_NOTEBOOK_TARGET", TARGET)
    monkeypatch.setenv("HF_DYNASPEC_NOTEBOOK_QUICK", "1")
    (tmp_path / "no-shared-data").mkdir()
    monkeypatch.setenv("HF_DYNASPEC_SHARED_DATA", str(tmp_path / "no-shared-data"))  # any use of ../shared fails
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    printed = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", [])
                      if o.get("output_type") == "stream")
    if name == "quickstart.ipynb":  # the notebook asserts exactness itself; here: drafts were accepted
        taus = [float(t) for t in re.findall(r"^tau: ([0-9.]+)", printed, flags=re.M)]
        assert taus and all(t > 1.0 for t in taus), printed[-2000:]
    if name == "train_your_assistant.ipynb":
        assert (tmp_path / "outputs" / "notebook" / "assistant" / "README.md").is_file()
        assert (tmp_path / "outputs" / "notebook" / "bench.json").is_file()
        answers = (tmp_path / "outputs" / "notebook" / "answers" / "responses_00000.jsonl").read_text().splitlines()
        assert len(answers) == 2 and all(json.loads(line)["response"] for line in answers)  # the target's own
