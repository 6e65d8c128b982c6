"""Drafting at run time: turn the target's verified hidden states into draft tokens.

Chain sessions (`chain.py`) and EAGLE-2 tree sessions (`tree.py`, `tree_structure.py`), the drafter's KV cache,
prompt lookup, and the runtime LM head a drafter scores through (`selector.py`: full / FR-Spec / VocabTrim /
DynaSpec with the position-aware budget of `budget.py`). Imports modeling (the artifact) and kernels.
"""
