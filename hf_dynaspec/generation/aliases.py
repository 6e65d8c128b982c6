"""The `custom_generate` names of earlier releases, kept as deprecated aliases of the one entry,
`speculative_generate` (hf_dynaspec.generation.speculative), until hf-dynaspec 0.2.

    chain_generate(..., drafter=a)                       -> speculative_generate(..., drafter=a)
    tree_generate(..., drafter=a, tree_depth=...)        -> speculative_generate(..., drafter=a, trees=True, ...)
    medusa_generate / lattice_generate(..., drafter=h)   -> speculative_generate(..., drafter=h)

Each warns once per process (FutureWarning) and has the entry's signature, so generate() hands it the same keyword
arguments.
"""

from __future__ import annotations

import functools
import inspect
import warnings

from hf_dynaspec.generation.speculative import speculative_generate

_warned: set[str] = set()


def _alias(name: str, trees: bool):
    @functools.wraps(speculative_generate)
    def alias(*args, **kwargs):
        if name not in _warned:
            _warned.add(name)
            extra = ", trees=True" if trees else ""
            warnings.warn(f"custom_generate={name} is now custom_generate=speculative_generate{extra} (one entry for "
                          f"every drafter); {name} goes in hf-dynaspec 0.2.", FutureWarning, stacklevel=2)
        return speculative_generate(*args, **({"trees": True} | kwargs if trees else kwargs))

    alias.__name__ = alias.__qualname__ = name
    alias.__signature__ = inspect.signature(speculative_generate)
    return alias


chain_generate = _alias("chain_generate", trees=False)
tree_generate = _alias("tree_generate", trees=True)
medusa_generate = _alias("medusa_generate", trees=False)
lattice_generate = _alias("lattice_generate", trees=False)
