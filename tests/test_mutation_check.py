"""The project's mutation check (benchmarks/mutation_check.py) stays true: every planted bug's snippet occurs
exactly once in the current source and names test files that exist. CI runs the whole check (.ci/run); this
keeps a refactor from leaving it stale between CI runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_mutation_check():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "benchmarks" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutation_snippet_occurs_once_in_the_source():
    check = load_mutation_check()
    assert check.stale_snippets() == []
    names = [m.name for m in check.MUTATIONS]
    assert len(names) == len(set(names)), "mutation names must be unique (--only selects by name)"


def test_a_stale_snippet_is_reported(tmp_path):
    """The staleness check itself can fail: a copy of the source with one snippet edited away is reported."""
    check = load_mutation_check()
    mutation = check.MUTATIONS[0]
    path, old, _ = mutation.edits()[0]
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text((ROOT / path).read_text().replace(old, "# edited away\n"))
    problems = check.stale_snippets(tmp_path)
    assert any(p.startswith(mutation.name) and "occurs 0 times" in p for p in problems)


def test_a_mutation_not_run_here_is_one_whose_path_cannot_run_here(monkeypatch):
    """The host capabilities the checker finds (in a process of its own) are the package's: a checker that thought a
    path absent where the package runs it would leave its mutations unchecked. With PyTorch lowered to AVX2 the
    checker, like the package, finds the packed path gone."""
    from hf_dynaspec.kernels.verify_rows import loader, packed

    check = load_mutation_check()
    assert {m.needs for m in check.MUTATIONS} - {None} == set(check.HOST_CAPABILITIES)
    expected = {"packed"} if packed.available() else set()
    expected |= {"avx512_bf16"} if loader.available() and loader.isa() == "avx512_bf16" else set()
    assert check.capabilities_here() == expected
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert "packed" not in check.capabilities_here()
