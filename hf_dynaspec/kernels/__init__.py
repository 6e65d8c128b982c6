"""Kernels, one folder per op, each with its reference, its backends and one entry point.

- `shortlist_head/`: scores of a shortlisted LM head (Triton on GPU, block matmuls on CPU, torch reference).
- `verify_rows/`: the CPU bf16 rows kernel (C source compiled on first use, its loader, the nn.Linear patch).
- `streams.py`: the side stream the DynaSpec router overlaps on.

Imports nothing of the package but the leaf modules (errors, paths): kernels know tensors, not assistants.
"""
