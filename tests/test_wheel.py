"""A user's install: the built wheel (not this checkout) in a fresh virtual environment, from PyPI as a user gets it.

The README quickstart's steps run in that environment, from a directory outside the checkout, with the trained
assistant given as a directory and as a Hub repo id (through the local Hub endpoint the other tests use): greedy
output is token-identical to plain generate() (fp32). `hf-dynaspec demo` runs with `--assistant` and, without one,
stops naming where the trained assistants are instead of using an untrained one (a wheel carries none).
Marked `real_model` (it needs the zoo's Qwen2.5-Coder-0.5B) and `slow` (a wheel build and installs: ~2 minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hf_dynaspec import zoo

pytestmark = [pytest.mark.real_model, pytest.mark.slow]
RUN_FIRST = True  # one worker makes the wheel's venv and runs every test here (tests/conftest.py)
ROOT = Path(__file__).resolve().parents[1]
TARGET = "qwen2.5-coder-0.5b-instruct"
ASSISTANT = ROOT / "assistants" / TARGET

QUICKSTART = textwrap.dedent('''
    import sys
    import tempfile
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import hf_dynaspec
    from hf_dynaspec import DynaSpecAssistant, zoo

    assert hf_dynaspec.__file__.startswith(sys.prefix), hf_dynaspec.__file__  # the wheel's copy, not the checkout
    target_path = zoo.fetch("qwen2.5-coder-0.5b-instruct")
    model = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    inputs = tokenizer("def fibonacci(n):", return_tensors="pt")
    plain = model.generate(**inputs, max_new_tokens=32)
    for assistant_path in sys.argv[1:]:  # directories or Hub repo ids
        assistant = DynaSpecAssistant.from_pretrained(assistant_path, target=model)
        out = model.generate(**inputs, assistant_model=assistant, max_new_tokens=32)
        assert torch.equal(out, plain), f"assisted output differs from plain generate() ({assistant_path})"
        with tempfile.TemporaryDirectory() as saved:  # the model card's template is package data the wheel must carry
            assistant.save_pretrained(saved)
            assert "# hf-dynaspec assistant for" in (Path(saved) / "README.md").read_text()
        print("exact tau", assistant.stats.tau)
''')


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(python, hf-dynaspec script) of a fresh venv with the built wheel installed (torch first, as the README says)."""
    if zoo.cached_path(TARGET) is None:
        pytest.fail(f"{TARGET} is not cached: run `hf-dynaspec models fetch {TARGET}` first (.ci/run does).")
    work = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what the wheel is made of: a build inside the checkout would reuse its build/ folder,
    # whose stale modules (deleted from the source since) would ship.
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("hf_dynaspec", "recipes"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(source)], cwd=work)
    (wheel,) = (work / "dist").glob("hf_dynaspec-*.whl")
    run([sys.executable, "-m", "venv", str(work / "venv")], cwd=work)
    python, script = work / "venv" / "bin" / "python", work / "venv" / "bin" / "hf-dynaspec"
    # --no-compile: the installs write no bytecode for every module (~40 s of CPU for torch and transformers); the
    # tests' processes compile what they import, and the wheel's contents are the same.
    run([str(python), "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"], cwd=work)
    run([str(python), "-m", "pip", "install", "-q", "--no-compile", str(wheel)], cwd=work)
    (work / "quickstart.py").write_text(QUICKSTART)
    return work, python, script


def run(command, cwd, env=None, check=True):
    result = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, env=env, timeout=900)
    if check and result.returncode:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def clean_env(**extra) -> dict:
    """The environment without this checkout on the path (nothing of the editable install leaks in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_wheel_carries_the_package_data_and_no_assistant(wheel_env):
    work, python, _ = wheel_env
    listing = run([python, "-c", "import hf_dynaspec, recipes.user_data as u, pathlib; "
                   "root = pathlib.Path(hf_dynaspec.__file__).parent; "
                   "print(sorted(p.name for p in root.rglob('*.c'))); print(u.starter_prompts_path().is_file())"],
                  cwd=work, env=clean_env()).stdout.split("\n")
    assert listing[0] != "[]" and listing[1] == "True"  # the CPU kernel's source and the starter prompts ship


def test_quickstart_from_the_wheel_is_exact_with_an_assistant_directory_and_a_hub_repo_id(wheel_env):
    """One process (the model loaded and plain generate() run once): the shipped directory, then the same files as
    a Hub repo served by the local endpoint."""
    from hub_server import FakeHub

    work, python, _ = wheel_env
    with FakeHub() as hub:
        hub.add_repo("hf-dynaspec/qwen2.5-coder-0.5b-instruct-assistant", ASSISTANT)
        env = clean_env(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(work / "hub-cache"))
        out = run([python, "quickstart.py", ASSISTANT, "hf-dynaspec/qwen2.5-coder-0.5b-instruct-assistant"], cwd=work,
                  env=env).stdout
        fetched = {path.rsplit("/", 1)[-1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    taus = [float(part.split()[0]) for part in out.split("exact tau")[1:]]
    assert len(taus) == 2 and all(tau > 1.0 for tau in taus), out  # a trained assistant drafts, from both
    assert {"config.json", "model.safetensors"} <= fetched


def test_demo_from_the_wheel_runs_with_an_assistant_and_stops_clearly_without(wheel_env):
    work, _, script = wheel_env
    common = ["demo", "--dtype", "fp32", "--max-new-tokens", "12", "--cpu-verify", "off"]
    done = run([script, *common, "--assistant", ASSISTANT], cwd=work, env=clean_env())
    assert "identical" in (done.stdout + done.stderr).lower()
    refused = run([script, *common], cwd=work, env=clean_env(), check=False)
    message = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "--assistant" in message and "assistants/" in message and "train one" in message
