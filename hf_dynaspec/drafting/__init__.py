"""Drafting at run time: turn the target's verified hidden states into draft tokens.

The one round (`round.py`) and its contract with the loops (`contract.py`, with draft trees), the proposers it
chooses among (`proposers/`; the copies in `lookup.py`) and the policies that choose (`planning/`), chain sessions
and the drafter's KV cache (`chain.py`), EAGLE-2 tree sessions (`tree.py`), lattices (`lattice.py`), and the runtime
LM head a drafter scores through (`selector.py`: full / FR-Spec / VocabTrim / DynaSpec with its position-aware row
budget). Imports modeling (the artifact) and kernels.
"""
