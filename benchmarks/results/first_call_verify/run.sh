#!/usr/bin/env bash
# Before (fa7c4f0) and after (a3114c8) alternately, twice each, at the machine's threads (2 here), then at one
# thread (as CI's test workers run). Worktrees: /tmp/wt_before, /tmp/wt_after.
set -euo pipefail
here=$(dirname "$0")
py=/work/main/.venv/bin/python
for threads in 2 1; do
  for round in 1 2; do
    for tree in /tmp/wt_before /tmp/wt_after; do
      OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads $py "$here/first_call.py" "$tree" 2>/dev/null | tail -1
    done
  done
done
