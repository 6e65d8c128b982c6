"""Tiny random targets of two families and assistants for them (no network, seconds to build)."""

from __future__ import annotations

import os

# Under pytest-xdist (the README's test command runs `-n 2`), each worker runs torch on one thread: the tiny
# models' tests are Python-bound, and two workers of two threads each on a 2-core machine oversubscribe it (OpenMP
# threads spinning against each other made single calls ~60x slower). Set before torch is imported, so subprocesses
# the tests start (the wheel's venv, notebook kernels, the CLI) inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_variable] = "1"

# The Triton kernel tests run under Triton's CPU interpreter, which must be chosen before anything imports
# Triton (transformers does, on import). On a GPU machine set HF_DYNASPEC_TRITON_GPU=1 to test the real kernel.
if os.environ.get("HF_DYNASPEC_TRITON_GPU") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Costs measured by draft_plan="auto" (hf_dynaspec.generation.costs) go to a per-run cache directory, never
# the user's; its models/ is the user's (the offline zoo's models). The CPU kernel is compiled into the per-run
# directory once: a cache reached through a symbolic link is not trusted by the loader, by design.
if "HF_DYNASPEC_TEST_HOME" not in os.environ:
    import tempfile

    from hf_dynaspec.cache_home import home_dir  # noqa: E402  (after TRITON_INTERPRET: the package imports triton)

    _user_home = home_dir()
    os.environ["HF_DYNASPEC_TEST_HOME"] = os.environ["HF_DYNASPEC_HOME"] = tempfile.mkdtemp(prefix="hf-dynaspec-test-")
    (_user_home / "models").mkdir(parents=True, exist_ok=True)
    os.symlink(_user_home / "models", os.path.join(os.environ["HF_DYNASPEC_HOME"], "models"))

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from hf_dynaspec import DynaSpecAssistant  # noqa: E402

VOCAB = 97  # deliberately not a power of two
# The target families the drafter mirrors (hf_dynaspec.modeling.families); most tests use the first two.
CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "mistral": MistralConfig,
           "phi3": Phi3Config, "gemma3_text": Gemma3TextConfig}
# Family settings a tiny model needs beyond the common sizes: Gemma-3 defaults to 256-wide heads and scales its
# attention by query_pre_attn_scalar (not head_dim: Gemma-3-27B differs too); six layers give it its sliding/global
# pattern (five local, one global).
FAMILY_SIZES = {"gemma3_text": dict(head_dim=8, query_pre_attn_scalar=12, num_hidden_layers=6)}


def tiny_target(family: str, seed: int = 0, vocab_size: int = VOCAB, **overrides):
    """A random causal LM of `family` (a key of CONFIGS), fp32, eval mode."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
    )
    common.update(FAMILY_SIZES.get(family, {}))
    common.update(overrides)
    config = CONFIGS[family](**common)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    # Sharper logits than the default init, so that greedy choices are not all near-ties.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model.eval()


# The mechanics tests (draft length, lookup, confidence stop, caches) pin the plan: K = num_assistant_tokens
# every round and no suffix cache. draft_plan="auto" (the default) has tests of its own (test_planner.py,
# test_suffix_cache.py, and auto cases in the exactness tests).
FIXED_PLAN = dict(draft_plan="fixed", suffix_cache_num_tokens=0)


def random_assistant(target, seed: int = 1, **overrides):
    """An assistant whose weights are random (not the last-layer init), so drafts are partly wrong."""
    assistant = DynaSpecAssistant.from_target(target, **{**FIXED_PLAN, **overrides})
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in assistant.parameters():
            param.normal_(0, 0.3)
    return assistant


def plain_generate(model, input_ids, **kwargs):
    return model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)


def assisted_generate(model, assistant, input_ids, **kwargs):
    return model.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant, **kwargs)


@pytest.fixture(params=["llama", "qwen2"])
def family(request):
    return request.param


def one_layer_target(family: str, seed: int = 0, vocab_size: int = VOCAB, **overrides):
    """A 1-layer target whose embedding rows have unit RMS, so that an EAGLE drafter can imitate it."""
    model = tiny_target(family, seed=seed, vocab_size=vocab_size, num_hidden_layers=1, **overrides)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.div_(emb.pow(2).mean(-1, keepdim=True).sqrt())
    return model


def imitating_assistant(target, noise: float = 0.0, seed: int = 1, **overrides):
    """An assistant that recomputes `target`'s single layer from the token embedding (fc = [I, 0]).

    It differs from the target only in the positions it sees (it never sees the first prompt token) and by
    `noise` added to its input fusion, so most drafts are accepted and some are not: the regime where
    exactness bugs (wrong cache rollback, EOS/length handling) show. It reads its own cache (the tokens'
    history) but not the target's features: tests/test_drafting.py checks feature alignment directly, by
    comparing the drafter's cache with a recomputation from the target's features.
    """
    assistant = DynaSpecAssistant.from_target(target, **{**FIXED_PLAN, **overrides})
    hidden = assistant.config.hidden_size
    with torch.no_grad():
        weight = torch.zeros(hidden, 2 * hidden)
        weight[:, :hidden] = torch.eye(hidden)
        assistant.drafter.fc.weight.copy_(weight)
        if noise:
            generator = torch.Generator().manual_seed(seed)
            fc = assistant.drafter.fc.weight
            # The noise is drawn on the CPU (the generator's stream) and added on the weight's device.
            fc.add_((noise * torch.randn(fc.shape, generator=generator) / hidden**0.5).to(fc.device, fc.dtype))
    return assistant


@pytest.fixture
def fixed_costs(monkeypatch):
    """`fixed_costs(costs)`: every planned call of the test sees `costs` (a `RoundCosts`: a machine of a chosen
    kind) instead of measuring this one."""
    def use(costs):
        monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: costs)
    return use


def pytest_collection_modifyitems(items):
    """The tests of a module whose module fixture is long to make (`RUN_FIRST = True`: the wheel's build and installs,
    ~75 s) run first. Under xdist's load scheduling the first chunk of tests goes to one worker, so that fixture is
    made once; as the last tests collected they were split between both workers, and each made it (the sort is
    stable: every other test keeps its order)."""
    items.sort(key=lambda item: not getattr(getattr(item, "module", None), "RUN_FIRST", False))
