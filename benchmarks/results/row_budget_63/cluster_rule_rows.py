"""Mean real cluster rows per draft position under the k(t) cluster rule, the rule before issue 63: what the shipped
row budgets (`shortlist_rows`) were set to. A record, not a tool: it patches `ClusterHead._clusters_from`, which
exists only before the row budget, so it runs from a checkout of 44c9b44 (drafter only, fixed K = 8, greedy, the
7 dev prompts; AVX-512 BF16 host; the counts do not depend on the host):

    git worktree add /tmp/old 44c9b44 && cd /tmp/old && PYTHONPATH=/tmp/old python cluster_rule_rows.py \
        qwen2.5-coder-0.5b-instruct /tmp/old/assistants/qwen2.5-coder-0.5b-instruct 64 cluster_rule_rows_05b.json
(1.5B: 32 new tokens.)"""
import json
import statistics
import sys
from collections import defaultdict

import torch

from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.selector import ClusterHead

target_name, assistant_dir, max_new, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = defaultdict(list)
original = ClusterHead._clusters_from
def recording(self, cluster_scores, position):
    chosen = original(self, cluster_scores, position)
    rows[position].append(sum(self.offsets[c + 1] - self.offsets[c] for c in chosen))
    return chosen
ClusterHead._clusters_from = recording
torch.set_num_threads(1)
target, tokenizer = load_target(target_name, "bf16")
assistant, _ = load_assistant(assistant_dir, target, target_name)
o = assistant.generation_config
o.prompt_lookup_num_tokens, o.suffix_cache_num_tokens, o.draft_plan, o.num_assistant_tokens = 0, 0, "fixed", 8
files = ["/work/shared/data/eval/spec_bench_dev.jsonl", "/work/shared/data/eval/humaneval_dev.jsonl"]
for prompt in encode_prompts(tokenizer, load_prompts(files, 1)):
    target.generate(prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids), do_sample=False,
                    max_new_tokens=max_new, assistant_model=assistant)
result = {p: {"steps": len(v), "mean_rows": statistics.fmean(v)} for p, v in sorted(rows.items())}
print(json.dumps(result))
json.dump({"target": target_name, "max_new_tokens": max_new, "per_position": result}, open(out, "w"), indent=1)
