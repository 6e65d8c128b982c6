"""The documentation site builds without warnings, and the links of README and docs point at real files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from exact_tokens import greedy_gaps

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strictly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "from_pretrained" in api and "check_exactness" in api  # generated from the docstrings


def test_relative_links_resolve():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_every_docs_page_is_in_the_index_and_the_site():
    """docs/index.md links every page of docs/, and mkdocs.yml's nav names every page."""
    pages = {page.name for page in (ROOT / "docs").glob("*.md")} - {"index.md"}
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)", (ROOT / "docs" / "index.md").read_text()))
    assert pages <= linked, f"docs/index.md misses {sorted(pages - linked)}"
    nav = set(re.findall(r":\s*([\w.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M))
    assert pages <= nav, f"mkdocs.yml's nav misses {sorted(pages - nav)}"


def test_the_readme_is_a_front_door():
    """At most 150 lines, the install command within the first 30, and its results block the one the results
    table generates (hf_dynaspec.bench.summary), so that its numbers are the recorded ones."""
    from hf_dynaspec.bench.results_table import read_records
    from hf_dynaspec.bench.summary import END, START, summary_tables

    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    assert any("pip install" in line for line in lines[:30]), "the install command must come within 30 lines"
    text = "\n".join(lines)
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    expected = summary_tables(read_records(ROOT / "benchmarks" / "results" / "results.jsonl")).strip()
    assert block == expected, ("README's results block is not the generated one: run python -m "
                               "hf_dynaspec.bench.summary benchmarks/results/results.jsonl --write README.md")


def test_the_results_page_holds_the_current_results():
    """docs/results.md is what holds now: the results table's generated block (as the README's), each host kind's
    section, and the journal of how it was reached kept beside the runs, not in the docs."""
    from hf_dynaspec.bench.results_table import read_records
    from hf_dynaspec.bench.summary import END, START, summary_tables

    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == summary_tables(read_records(ROOT / "benchmarks" / "results" / "results.jsonl")).strip(), (
        "run python -m hf_dynaspec.bench.summary benchmarks/results/results.jsonl --write docs/results.md")
    for section in ("## AVX-512 BF16 host", "## AVX-512 host without BF16", "## AVX2 host", "## GPU"):
        assert section in text, section
    assert len(text.splitlines()) <= 200, "the history goes to benchmarks/results/journal.md"
    assert (ROOT / "benchmarks" / "results" / "journal.md").exists()


@pytest.mark.real_model
def test_readme_python_blocks_run_as_written(monkeypatch):
    """Every ```python block of the README, in order, in one namespace, from the repository root."""
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    prompt = namespace["inputs"]["input_ids"]
    assert namespace["out"].shape[1] > prompt.shape[1]
    # fast_cpu: plain generate() on the routed kernels, greedy up to bf16 near-ties, and undone afterwards.
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    assert not verify_rows_patch.is_enabled(namespace["model"])
    assert (greedy_gaps(namespace["model"], prompt, namespace["plain_out"][0, prompt.shape[1]:]) <= 1.0).all()
    assert namespace["assistant"].generation_config.shortlist == "dynaspec"
    # What the README promises: greedy output, up to bf16 near-ties, at every token.
    assert (greedy_gaps(namespace["model"], prompt, namespace["out"][0, prompt.shape[1]:]) <= 1.0).all()
    # The batch: each row greedy on its own prompt (no padding), up to bf16 near-ties.
    batch, outs = namespace["batch"], namespace["outs"]
    width = batch["input_ids"].shape[1]
    eos = namespace["model"].generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    for row in range(outs.shape[0]):
        own = batch["input_ids"][row][batch["attention_mask"][row].bool()][None]
        new = outs[row, width:].tolist()
        new = new[: next((i + 1 for i, t in enumerate(new) if t in eos), len(new))]
        assert len(new) > 1 and (greedy_gaps(namespace["model"], own, torch.tensor(new)) <= 1.0).all()
    # docs/trees.md continues the README's quickstart (its model, inputs and assistant_path)
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "trees.md").read_text(), flags=re.S):
        exec(compile(block, "docs/trees.md", "exec"), namespace)
    assert namespace["out"].shape[1] > namespace["inputs"]["input_ids"].shape[1]


@pytest.mark.real_model
def test_quickstart_page_runs_as_written(monkeypatch):
    """docs/quickstart.md's ```python blocks in order, in a fresh namespace: its exactness check included."""
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "quickstart.md").read_text(), flags=re.S)
    assert len(blocks) == 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/quickstart.md", "exec"), namespace)
    prompt_length = namespace["inputs"]["input_ids"].shape[1]
    for name in ("fast", "sampled", "out", "plain_fast", "copied"):
        assert namespace[name].shape[1] > prompt_length
    for name in ("fast", "out", "plain_fast", "copied"):  # the greedy ones
        assert (greedy_gaps(namespace["model"], namespace["inputs"]["input_ids"],
                            namespace[name][0, prompt_length:]) <= 1.0).all(), name
    stats = namespace["assistant"].stats  # of its last call (sampling): the drafter drafted and was verified
    assert stats.verify_passes > 0 and stats.drafted >= stats.verify_passes
    assert namespace["frspec"].generation_config.shortlist == "frspec" and namespace["full"].generation_config.shortlist == "full"


def test_readme_test_command_is_what_ci_runs():
    """The README's bash blocks: the test command is .ci/run's, and every command they name exists."""
    from hf_dynaspec.cli import build_parser

    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = next(line for block in blocks for line in block.splitlines() if "pytest" in line)
    after_venv = test_command.split(". .venv/bin/activate && ", 1)[1]
    assert after_venv in ci.splitlines(), "README and .ci/run must run the same test command"
    subcommands = build_parser()._subparsers._group_actions[0].choices
    for block in blocks:
        for name in re.findall(r"hf-dynaspec ([a-z-]+)", block):
            assert name in subcommands, f"README runs `hf-dynaspec {name}`, which does not exist"
