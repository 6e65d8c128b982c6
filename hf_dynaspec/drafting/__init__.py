"""Drafting at run time: turn the target's verified hidden states into draft tokens.

Chain sessions and the drafter's KV cache (`chain.py`), EAGLE-2 tree sessions (`tree.py`), the round contract and
draft trees (`contract.py`), prompt lookup, and the runtime LM head a drafter scores through (`selector.py`: full /
FR-Spec / VocabTrim / DynaSpec with its position-aware row budget). Imports modeling (the artifact) and kernels.
"""
