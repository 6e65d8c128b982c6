"""Generation: how an assistant is used by `generate()`. Imports drafting, modeling and kernels.

- `hook.py`: the `assistant_model=` route (wraps transformers' private candidate-generator factory; installed
  once, here, on import);
- `candidate_generator.py`: chain drafting as a transformers `CandidateGenerator`;
- `speculative.py`: the one public `custom_generate` entry, `speculative_generate`, and its routes by drafter kind
  (`medusa.py`: the lattice sources'); `aliases.py` its deprecated names; `batched_loop.py` the one loop,
  `static_round.py` where its target's KV lives, and `tree_verify.py`, how a tree is verified;
- `attachment.py`, `checks.py`: binding an assistant to the call's target, refusing inputs it cannot serve.
"""

from hf_dynaspec.generation import hook
from hf_dynaspec.generation.speculative import speculative_generate

hook.install()

__all__ = ["speculative_generate"]
