"""Consistency of shards written by `recipes.self_distill --features-out`: on greedy answers, the cached top-1
at each position must be the token the target generated next.

    python benchmarks/check_self_distilled_shards.py outputs/features/qwen05-sd2
"""

import sys
from pathlib import Path

from recipes.training_data import feature_shards, load_sequences

for shard in feature_shards([Path(sys.argv[1])]):
    sequences = load_sequences(shard)
    agree = answer_tokens = tokens = 0
    for s in sequences:
        start = int(s.response.float().argmax())
        agree += int((s.topk_ids[start - 1 : -1, 0].long() == s.input_ids[start:].long()).sum())
        answer_tokens += int(s.response.sum())
        tokens += len(s.input_ids)
    print(f"{shard.name}: {len(sequences)} sequences, {tokens} tokens, {answer_tokens} answer tokens, "
          f"top-1 == generated token at {agree} / {answer_tokens}")
