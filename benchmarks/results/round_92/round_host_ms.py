"""Host time per round, old code against new (issue 92's "speed unchanged", where a round's host work would show):
a 1-layer llama target (tests/conftest.py), fp32, one thread, the imitating assistant with the shipped options
(with --lookups: planned rounds, prompt lookup, suffix cache; else fixed chains of 2, so that a call is
many rounds), 64 new tokens on the assistant_model= route and on
speculative_generate / chain_generate, 15 timed calls after 3 warm-ups; prints milliseconds per verify pass.

    python benchmarks/results/round_92/round_host_ms.py ROOT [--lookups]   # ROOT: the checkout to import hf_dynaspec from
"""

import sys
import time

sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
root = sys.argv[1]
sys.path.insert(0, root)
sys.path.insert(0, f"{root}/tests")
import torch  # noqa: E402

torch.set_num_threads(1)
from conftest import imitating_assistant, one_layer_target  # noqa: E402

import hf_dynaspec  # noqa: E402

target = one_layer_target("llama", seed=2)
options = dict(draft_plan="auto", prompt_lookup_num_tokens=5, suffix_cache_num_tokens=16) if "--lookups" in sys.argv \
    else dict(draft_plan="fixed", num_assistant_tokens=2, prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
assistant = imitating_assistant(target, noise=0.6, seed=4, **options)
entry = hf_dynaspec.speculative_generate
prompt = torch.randint(0, target.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(3))
routes = {"assistant_model=": dict(assistant_model=assistant),
          "custom_generate": dict(custom_generate=entry, drafter=assistant)}
for name, kwargs in routes.items():
    for _ in range(3):
        target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=64, do_sample=False, **kwargs)
    seconds, passes = 0.0, 0
    for _ in range(15):
        start = time.perf_counter()
        target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=64, do_sample=False, **kwargs)
        seconds += time.perf_counter() - start
        passes += assistant.stats.verify_passes
    print(f"{hf_dynaspec.__file__.split('/hf_dynaspec')[0]} {name}: {1000 * seconds / passes:.3f} ms per pass "
          f"({passes / 15:.1f} passes a call, tau {assistant.stats.tau:.2f})", flush=True)
