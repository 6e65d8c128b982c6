"""#76 diagnosis, 2026-11-29: what the drafter's consume pass costs when positions were deferred (lookup and
no-draft rounds defer it; the next drafter round absorbs them all), against the 2 positions calibration times
(`RoundCosts.consume_seconds`). The 1.5B with its shipped assistant, bf16, the shipped drafting options; AVX-512 BF16
+ AMX host, 2 cores, nothing else running.

    python benchmarks/results/copies_76/consume_backlog.py > benchmarks/results/copies_76/consume_backlog.txt
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.generation.costs.timing import CONTEXT, min_seconds, random_ids
from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.loading import load_target

torch.set_grad_enabled(False)
target, _ = load_target("qwen2.5-coder-1.5b-instruct", dtype="bf16")
assistant = DynaSpecAssistant.from_pretrained("assistants/qwen2.5-coder-1.5b-instruct", target=target)
options = assistant.generation_config
head = runtime_head(assistant, options)
ids = random_ids(target, assistant.config.vocab_size, "cpu", largest=40)
out = target(input_ids=ids[:, : CONTEXT + 40], **cache_kwargs(target, DynamicCache()), use_cache=True,
             output_hidden_states=assistant.drafter.hidden_state_selection())
hidden = assistant.drafter.select_target_hidden(out.hidden_states)
session = ChainDraftSession(assistant.drafter, vocab_size=assistant.config.vocab_size, do_sample=False, head=head)
session.consume_verified(ids[:, : CONTEXT - 2], hidden, choose=False)
start = session.num_verified_pairs


def consume(n: int) -> None:
    session.num_verified_pairs = start
    session.cache.crop(start)
    session.consume_verified(ids[:, : CONTEXT - 2 + n], hidden[:, start:], choose=True)


verify = {}
cache = DynamicCache()
target(input_ids=ids[:, :CONTEXT], **cache_kwargs(target, cache), use_cache=True)
for n in (1, 2):
    def forward(n=n):
        target(input_ids=ids[:, CONTEXT : CONTEXT + n], **cache_kwargs(target, cache), use_cache=True)
        cache.crop(-n)
    forward()
    verify[n] = min_seconds(forward, ())
print(f"target verify(1) {verify[1] * 1000:.1f} ms, verify(2) {verify[2] * 1000:.1f} ms")
for n in (2, 4, 8, 12, 17, 24, 33):
    consume(n)
    seconds = min_seconds(lambda n=n: consume(n), ())
    print(f"consume over {n:2d} positions: {seconds * 1000:6.1f} ms = {seconds / verify[1]:.3f} verify(1)")
