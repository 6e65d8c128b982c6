"""The hook into transformers' private generation API fails soft: with each wrapped function removed (or its
arguments renamed) in turn, as a future transformers might, `import hf_dynaspec` succeeds with one logged warning
naming what is disabled, the public route stays greedy-exact, and an assistant passed to the disabled
`assistant_model=` route is refused naming the public route.

Each case runs in a subprocess: the change to transformers must happen before hf_dynaspec is imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# (what to do to transformers before the import, the private name whose wrapper is then disabled)
BREAKS = {
    "_get_candidate_generator removed": ("del GenerationMixin._get_candidate_generator", "_get_candidate_generator"),
    "_get_candidate_generator arguments renamed": (
        "GenerationMixin._get_candidate_generator = lambda self, generation_config, input_ids, inputs_tensor, "
        "logits_processor, model_kwargs, draft_model=None: None", "_get_candidate_generator"),
    # transformers' own generate() calls it: changed, not removed, so that generate() itself still runs.
    "_validate_generation_mode arguments changed": (
        "GenerationMixin._validate_generation_mode = (lambda original: lambda self, *args, **kwargs: "
        "original(self, *args, **kwargs))(GenerationMixin._validate_generation_mode)", "_validate_generation_mode"),
    "_speculative_sampling removed": ("del generation_utils._speculative_sampling", "_speculative_sampling"),
    # generate(assistant_model=) itself then fails in transformers; the import and the public route must not.
    "_assisted_decoding removed": ("del GenerationMixin._assisted_decoding", "_assisted_decoding"),
}

SCRIPT = """
import logging, sys
sys.path.insert(0, {tests!r})
import torch
import transformers.generation.utils as generation_utils
from transformers.generation.utils import GenerationMixin
{break_it}
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("hf_dynaspec.generation.hook").addHandler(handler)
import hf_dynaspec
from hf_dynaspec.generation import hook
from conftest import imitating_assistant, one_layer_target, plain_generate
assert set(hook.DISABLED) == {{{disabled!r}}}, hook.DISABLED
warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
assert len(warnings) == 1 and {disabled!r} in warnings[0] and "disabled" in warnings[0], warnings
target = one_layer_target("llama")
assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
prompt = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(0))
expected = plain_generate(target, prompt, max_new_tokens=20)
for trees in (False, True):
    got = target.generate(prompt, custom_generate=hf_dynaspec.speculative_generate, drafter=assistant, trees=trees,
                          max_new_tokens=20)
    assert torch.equal(got, expected), trees
try:
    routed = target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                             max_new_tokens=20)
except Exception as error:
    print("REFUSED", type(error).__name__, error)
else:
    assert torch.equal(routed, expected)
    print("ROUTED")
"""


@pytest.mark.parametrize("case", BREAKS)
def test_import_and_public_route_survive_a_changed_transformers(case):
    """~10 s per case (a fresh interpreter imports torch and transformers)."""
    break_it, disabled = BREAKS[case]
    script = SCRIPT.format(tests=str(TESTS), break_it=break_it, disabled=disabled)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    if disabled == "_get_candidate_generator":
        assert "REFUSED UnsupportedTransformersError" in result.stdout, result.stdout
        assert "custom_generate=hf_dynaspec.speculative_generate" in result.stdout
    elif disabled in ("_validate_generation_mode", "_speculative_sampling"):
        assert "ROUTED" in result.stdout, result.stdout + result.stderr[-2000:]  # the route itself is intact


def test_a_gpu_call_on_a_syncing_transformers_release_warns(monkeypatch):
    """transformers < 5.18 reads the match count in every layer's crop (benchmarks/assisted_syncs.py: 81.5 syncs per
    pass at 24 layers on 5.17): a CUDA call of the assistant_model= route says so with the fix; a CPU call and a
    newer release do not."""
    import torch

    import hf_dynaspec.generation.candidate_generator as candidate_generator

    said = []
    monkeypatch.setattr(candidate_generator.logger, "warning_once", said.append)
    for crops_once, device in ((False, "cuda"), (False, "cpu"), (True, "cuda")):
        monkeypatch.setattr(candidate_generator, "TRANSFORMERS_CROPS_AT_EOS", crops_once)
        candidate_generator.warn_if_gpu_crops_sync(torch.device(device))
    assert len(said) == 1 and "transformers>=5.18" in said[0] and "custom_generate=" in said[0]
