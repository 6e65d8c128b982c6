#!/bin/bash
# Why .ci/run gives the user commands OMP_WAIT_POLICY=PASSIVE (benchmarks/results/ci_rehearsal_2026-12-07.txt).
# Two single-thread CPU-bound workers (like the suite's) beside a 2-thread torch generate (like the user's demo):
# how much work do the workers get done, and how long does the generate take, with and without passive waiting?
cd "$(dirname "$0")/.." && . .venv/bin/activate
tmp=$(mktemp -d)
cat > "$tmp/worker.py" <<'PY'
import time, torch, sys
torch.set_num_threads(1)
a = torch.randn(256, 256); n = 0; end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = (a @ a).tanh(); n += 1
print("worker iterations", n)
PY
cat > "$tmp/gen.py" <<'PY'
import time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_dynaspec import zoo
p = zoo.fetch("qwen2.5-coder-0.5b-instruct")
m = AutoModelForCausalLM.from_pretrained(p, dtype=torch.bfloat16); t = AutoTokenizer.from_pretrained(p)
x = t("def fibonacci(n):", return_tensors="pt")
m.generate(**x, max_new_tokens=4)
s = time.time(); m.generate(**x, max_new_tokens=32, do_sample=False); print("generate 32 tokens", round(time.time() - s, 1), "s")
PY
for policy in "" PASSIVE; do
  echo "== OMP_WAIT_POLICY=$policy"
  python "$tmp/gen.py" > /dev/null 2>&1  # warm the file cache
  OMP_NUM_THREADS=1 python "$tmp/worker.py" 40 & OMP_NUM_THREADS=1 python "$tmp/worker.py" 40 &
  sleep 3
  if [ -n "$policy" ]; then OMP_WAIT_POLICY=$policy python "$tmp/gen.py" 2>&1 | grep generate; else python "$tmp/gen.py" 2>&1 | grep generate; fi
  wait
done
echo "== alone"; python "$tmp/gen.py" 2>&1 | grep generate; OMP_WAIT_POLICY=PASSIVE python "$tmp/gen.py" 2>&1 | grep generate
