"""SparseTopP against the TopPLogitsWarper of whatever transformers runs it (the compatibility job's 5.8.0 cannot
collect tests/test_row_processing.py: an older test there builds a processor 5.8 refuses). 600 batches of 3 rows:

    PYTHONPATH=. .compat-venv-5.8.0/bin/python benchmarks/results/sampled_75c/sparse_top_p_other_release.py

Output of the run quoted in the 2026-11-29 closing note: sparse_top_p_other_release.txt beside it."""

from __future__ import annotations

import torch
import transformers
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from hf_dynaspec.drafting.row_processing import SparseTopP

VOCAB = 4096
mismatches = total = 0
for seed in range(200):
    logits = (torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
    ids = torch.zeros(3, 1, dtype=torch.long)
    scores = TopKLogitsWarper([5, 20, 64][seed % 3])(ids, TemperatureLogitsWarper(0.7)(ids, logits))
    for top_p, keep in [(0.8, 1), (0.5, 1), (0.3, 6)]:
        original = TopPLogitsWarper(top_p, min_tokens_to_keep=keep)
        total += 1
        mismatches += not torch.equal(SparseTopP.like(original)(ids, scores.clone()), original(ids, scores.clone()))
print(f"transformers {transformers.__version__}: {mismatches} mismatches of {total}")
