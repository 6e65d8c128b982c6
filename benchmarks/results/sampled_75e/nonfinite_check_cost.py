"""#75: SparseTopP's check for NaN and +inf on a 151,936-entry row after a top-k of 20 (the published Qwen2.5
settings), before (two passes: isnan over the row, isinf over the kept entries) and after (one row sum), timed in
one process with torch.utils.benchmark. Output: nonfinite_check_cost.txt."""
import torch
from torch.utils import benchmark
from transformers import TopKLogitsWarper

torch.manual_seed(0)
row = TopKLogitsWarper(20)(None, (torch.randn(1, 151936) * 3).to(torch.bfloat16).float())[0]
kept = (row > float("-inf")).nonzero().squeeze(1)
checks = {"before: isnan(row).any() or isinf(row[kept]).any()":
          "bool(torch.isnan(row).any()) or bool(torch.isinf(row[kept]).any())",
          "after: row.sum() == -inf": "bool(row.sum() == float('-inf'))"}
for name, stmt in checks.items():
    m = benchmark.Timer(stmt, globals={"torch": torch, "row": row, "kept": kept}).blocked_autorange(min_run_time=1.0)
    print(f"{name}: {m.median * 1e3:.3f} ms")
