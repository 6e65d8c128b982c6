"""The CPU bf16 rows kernel: K rows through a Linear in one pass over its weight (verification and drafting).

`bf16_rows.c` (the source, compiled on first use), `loader.py` (compile, cache in a private directory, load),
`patch.py` (route chosen nn.Linear modules through it; `enable` / `disable`).
"""
