"""#75: one verified position's processors under Qwen2.5-Coder's published sampling settings (repetition penalty
1.1, temperature 0.7, top-k 20, top-p 0.8) on a 151,936-entry row after a 300-token context, timed in one process
with torch.utils.benchmark (median of blocked_autorange), for:
- transformers' list as it builds it;
- with top-p as SparseTopP only (the package at 79ba65a);
- with top-k and top-p as one SparseTopKTopP (with_sparse_warpers now).
The three results are checked equal bit for bit first. Output: processors_cost.txt (host kind named there)."""
import subprocess

import torch
from torch.utils import benchmark
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec.drafting.row_processing import SparseTopP, with_sparse_warpers

torch.manual_seed(0)
vocab = 151_936
logits = (torch.randn(1, vocab) * 3).to(torch.bfloat16).float()
context = torch.randint(0, vocab, (1, 300))
published = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7),
                                 TopKLogitsWarper(20), TopPLogitsWarper(0.8)])
lists = {"transformers' list": published,
         "top-p as SparseTopP (79ba65a)": LogitsProcessorList([*published[:3], SparseTopP.like(published[3])]),
         "top-k + top-p as SparseTopKTopP (now)": with_sparse_warpers(published)}
reference = published(context, logits.clone())
flags = subprocess.run("lscpu | grep -o 'avx512_bf16\\|amx' | sort -u | tr '\\n' ' '", shell=True,
                       capture_output=True, text=True).stdout
print(f"host flags: {flags or 'none (AVX2 or older)'}; torch {torch.__version__}; threads {torch.get_num_threads()}")
for name, processors in lists.items():
    assert torch.equal(processors(context, logits.clone()), reference), name
    timer = benchmark.Timer("processors(context, logits.clone())",
                            globals={"processors": processors, "context": context, "logits": logits})
    print(f"{name}: {timer.blocked_autorange(min_run_time=2.0).median * 1e3:.3f} ms per position")
