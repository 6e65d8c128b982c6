"""The name under which a target's forward takes its KV cache: `cache` where the release documents it
(transformers 5.24 renamed the argument and warns that `past_key_values` goes in 5.40), `past_key_values` before.

Read from the forward's signature rather than from the version number, so that a model class that kept the old
name (remote or older code) still gets the name it accepts.
"""

from __future__ import annotations

import functools
import inspect


@functools.cache
def _cache_argument(model_class: type) -> str:
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """`{name: cache}` for `model(**cache_kwargs(model, cache), ...)`."""
    return {_cache_argument(type(model)): cache}
