"""#75: the costs behind SparseTopP and the sparse race, and how often SparseTopP falls back on real logits.

    python benchmarks/results/sampled_75c/processors_cost.py

1. One verified position's processing with Qwen2.5-Coder's published settings on one bf16-valued row of 151,936
   logits (torch.utils.benchmark, 2 threads): transformers' list against the same list with SparseTopP.
2. How often torch.sort's (unstable) order of equal values differs from a stable sort's, on top-k'd rows: why a
   cut between equal logits goes to transformers' call.
3. One draw from a top-k'd row: the whole-row exponential race against the sparse one.
4. A sampled 0.5B call (assistant_model=, the shipped assistant, 7 dev prompts x 64 tokens): rows SparseTopP
   decided against rows it handed to transformers, and the rounds that drafted nothing.
Output of the run quoted in docs/results.md and the 2026-11-29 closing note: processors_cost.txt beside it.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.logits_process import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec import sampling
from hf_dynaspec.drafting.row_processing import SparseTopP, with_sparse_top_p
from hf_dynaspec.generation import candidate_generator
from hf_dynaspec.modeling.assistant import DynaSpecAssistant
from hf_dynaspec.zoo import resolve_model_path

ROOT = Path(__file__).resolve().parents[3]
VOCAB = 151_936


def published() -> LogitsProcessorList:
    return LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7),
                                TopKLogitsWarper(20), TopPLogitsWarper(0.8)])


def ms(statement: str, **names) -> float:
    timer = benchmark.Timer(stmt=statement, globals=names, num_threads=2)
    return timer.blocked_autorange(min_run_time=1.0).median * 1000


def main() -> None:
    row = (torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(0)) * 3).bfloat16().float()
    ids = torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(1))
    print(f"1. one position: transformers' list {ms('p(ids, row.clone())', p=published(), ids=ids, row=row):.2f} ms, "
          f"with SparseTopP {ms('p(ids, row.clone())', p=with_sparse_top_p(published()), ids=ids, row=row):.2f} ms")
    differs = 0
    for seed in range(200):
        logits = (torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
        scores = TopKLogitsWarper(40)(ids, logits)
        finite = int((scores > float("-inf")).sum())
        unstable, stable = torch.sort(scores)[1][0, -finite:], torch.sort(scores, stable=True)[1][0, -finite:]
        differs += not torch.equal(unstable, stable)
    print(f"2. torch.sort's order of the finite entries differs from a stable sort's in {differs} of 200 top-k'd rows")
    probs = TopKLogitsWarper(20)(ids, row).softmax(-1)
    whole = ms("(probs / torch.empty_like(probs).exponential_()).argmax(-1)", probs=probs, torch=torch)
    print(f"3. one draw: whole-row race {whole:.2f} ms, sparse race {ms('sample(probs)', probs=probs, sample=sampling.sample):.2f} ms")
    real_call()


def real_call() -> None:
    name = "qwen2.5-coder-0.5b-instruct"
    path = resolve_model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    assistant = DynaSpecAssistant.from_pretrained(str(ROOT / "assistants" / name), target=model)
    decided = collections.Counter()
    sparse_row = SparseTopP._sparse_row

    def counted(self, row):
        out = sparse_row(self, row)
        decided["fell back" if out is None else "sparse"] += 1
        return out

    SparseTopP._sparse_row = counted
    rounds = collections.Counter()
    get_candidates = candidate_generator.EagleCandidateGenerator.get_candidates

    def drafted(self, input_ids, *args, **kwargs):
        ids, logits = get_candidates(self, input_ids, *args, **kwargs)
        rounds["nothing drafted" if ids.shape[1] == input_ids.shape[1] else "drafted"] += 1
        return ids, logits

    candidate_generator.EagleCandidateGenerator.get_candidates = drafted
    seen, rows = set(), []
    for line in open(ROOT.parent / "shared/data/eval/spec_bench_dev.jsonl"):
        row = json.loads(line)
        if row["category"] not in seen:
            seen.add(row["category"])
            rows.append(row)
    for i, row in enumerate(rows[:7]):
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": row["turns"][0]}],
                                                add_generation_prompt=True, return_tensors="pt")
        input_ids = encoded if torch.is_tensor(encoded) else encoded["input_ids"]
        torch.manual_seed(i)
        model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=64, assistant_model=assistant,
                       do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.1)
    print(f"4. a sampled 0.5B call, 7 prompts x 64 tokens: SparseTopP rows {dict(decided)}; rounds {dict(rounds)} "
          "(the prefill's first call counted as nothing drafted)")


if __name__ == "__main__":
    main()
