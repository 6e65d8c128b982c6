"""#75, a prototype (not shipped): transformers' top-k and top-p in one pass on the CPU, exact (checked against
transformers' pair here), to size what fusing them would save per verified position beside SparseTopP.

    python benchmarks/results/sampled_75c/fused_top_k_top_p_prototype.py

Output of the run quoted in the 2026-11-29 closing note (AVX-512 BF16 + AMX host): fused_top_k_top_p_prototype.txt."""
import torch
from transformers.generation.logits_process import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

import hf_dynaspec.drafting.row_processing as rp


class FusedTopKTopP:
    def __init__(self, top_k, top_p):
        self.top_k, self.top_p = top_k, top_p
        self.sparse = rp.SparseTopP.like(top_p)
    def __call__(self, input_ids, scores):
        if scores.device.type != "cpu" or scores.dim() != 2:
            return self.top_p(input_ids, self.top_k(input_ids, scores))
        rows = []
        for i, row in enumerate(scores):
            out = self._row(row)
            rows.append(out if out is not None else self.top_p(input_ids, self.top_k(input_ids, scores[i:i+1]))[0])
        return torch.stack(rows)
    def _row(self, row):
        vocab = row.shape[0]
        k = min(self.top_k.top_k, vocab)
        top = torch.topk(row, k)[0]
        kth = top[-1]
        if not bool(torch.isfinite(top[0])) or not bool(torch.isfinite(kth)):
            return None
        kept = (row >= kth).nonzero().squeeze(1)
        n = kept.shape[0]
        if n * 8 > vocab:
            return None
        values, order = torch.sort(row[kept])
        removed = rp.SparseTopP.cumulative(values, vocab) <= (1 - self.top_p.top_p)
        removed[max(n - self.top_p.min_tokens_to_keep, 0):] = False
        cut = int(removed.sum())
        if 0 < cut < n and values[cut - 1] == values[cut]:
            return None
        out = row.new_full((vocab,), float("-inf"))
        keep = kept[order[cut:]]
        out[keep] = row[keep]
        return out

def fused(processors):
    if processors is None:
        return processors
    out, items, i = LogitsProcessorList(), list(processors), 0
    while i < len(items):
        p = items[i]
        if (type(p) is TopKLogitsWarper and i + 1 < len(items) and type(items[i + 1]) is TopPLogitsWarper
                and p.filter_value == float("-inf") and items[i + 1].filter_value == float("-inf")):
            out.append(FusedTopKTopP(p, items[i + 1]))
            i += 2
        else:
            out.append(rp.SparseTopP.like(p) if type(p) is TopPLogitsWarper else p)
            i += 1
    return out

if __name__ == "__main__":
    import time

    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper
    bad = 0
    for seed in range(300):
        width = 151936 if seed < 20 else 4096
        x = (torch.randn(2, width, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
        ids = torch.zeros(2, 1, dtype=torch.long)
        x = TemperatureLogitsWarper(0.7)(ids, x)
        k, p = TopKLogitsWarper([5, 20, 64][seed % 3]), TopPLogitsWarper([0.8, 0.5, 0.95][seed % 3])
        bad += not torch.equal(FusedTopKTopP(k, p)(ids, x.clone()), p(ids, k(ids, x.clone())))
    print("fused mismatches", bad, "of 300")
    V = 151936
    x = (torch.randn(1, V) * 3).bfloat16().float()
    ids = torch.randint(0, V, (1, 300))
    base = [RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7), TopKLogitsWarper(20),
            TopPLogitsWarper(0.8)]
    for name, lst in [("sparse", rp.with_sparse_top_p(LogitsProcessorList(base))), ("fused", fused(LogitsProcessorList(base)))]:
        for _ in range(30):
            lst(ids, x.clone())
        t = time.perf_counter()
        for _ in range(500):
            lst(ids, x.clone())
        print(name, round((time.perf_counter() - t) / 500 * 1000, 3), "ms per position")
