"""Generation: how an assistant is used by `generate()`. Imports drafting, modeling and kernels.

- `hook.py`: the `assistant_model=` route (wraps transformers' private candidate-generator factory; installed
  once, here, on import);
- `candidate_generator.py`: chain drafting as a transformers `CandidateGenerator`;
- `speculative.py` / `medusa.py`: the public `custom_generate` routes (`speculative_generate`, also named
  `chain_generate` and `tree_generate`; `medusa_generate`), `batched_loop.py` their one loop, `static_round.py`
  where its target's KV lives, and `tree_verify.py`, how a tree is verified;
- `attachment.py`, `checks.py`: binding an assistant to the call's target, refusing inputs it cannot serve.
"""

from hf_dynaspec.generation import hook
from hf_dynaspec.generation.medusa import lattice_generate, medusa_generate
from hf_dynaspec.generation.speculative import chain_generate, parse_tree_shape, speculative_generate, tree_generate

hook.install()

__all__ = ["chain_generate", "lattice_generate", "medusa_generate", "parse_tree_shape", "speculative_generate",
           "tree_generate"]
