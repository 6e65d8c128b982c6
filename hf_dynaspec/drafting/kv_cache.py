"""A preallocated key/value cache for the drafter's single attention layer.

The drafter appends one to a few positions per step and rolls back to the verified prefix after each
verification. Writing into a buffer that grows by doubling avoids a `torch.cat` (a fresh allocation of the
whole cache) on every draft step, which transformers' `DynamicCache` would do.
"""

from __future__ import annotations

import torch


class DraftKVCache:
    """Keys and values of one attention layer, `[1, H_kv, T, head_dim]` views into growing buffers.

    Implements the `update(key, value, layer_idx, ...)` method transformers' attention modules call.
    """

    def __init__(self, initial_capacity: int = 256):
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._initial_capacity = initial_capacity
        self.length = 0

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int = 0, *args, **kwargs):
        new = key.shape[-2]
        needed = self.length + new
        if self._keys is None or needed > self._keys.shape[-2]:
            self._grow(key, value, needed)
        self._keys[..., self.length : needed, :] = key
        self._values[..., self.length : needed, :] = value
        self.length = needed
        return self._keys[..., :needed, :], self._values[..., :needed, :]

    def _grow(self, key: torch.Tensor, value: torch.Tensor, needed: int) -> None:
        capacity = max(self._initial_capacity, needed)
        if self._keys is not None:
            capacity = max(capacity, 2 * self._keys.shape[-2])
        # Zeros, not uninitialised memory: a captured step (drafting/captured.py) attends over the whole buffer
        # under a mask, and a masked NaN would still reach the output (0 x NaN).
        keys = key.new_zeros(*key.shape[:-2], capacity, key.shape[-1])
        values = value.new_zeros(*value.shape[:-2], capacity, value.shape[-1])
        if self._keys is not None and self.length:
            keys[..., : self.length, :] = self._keys[..., : self.length, :]
            values[..., : self.length, :] = self._values[..., : self.length, :]
        self._keys, self._values = keys, values

    def reserve(self, length: int) -> None:
        """Make room for `length` positions now (a captured draft writes into the buffers and cannot grow them)."""
        if self._keys is None:
            raise ValueError("reserve() needs the cache's first entries (their shapes and dtype)")
        if length > self._keys.shape[-2]:
            self._grow(self._keys[..., :0, :], self._values[..., :0, :], length)

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole key and value buffers `[1, H_kv, capacity, head_dim]` (positions past `length` are stale)."""
        if self._keys is None:
            raise ValueError("the draft cache is empty")
        return self._keys, self._values

    def crop(self, length: int) -> None:
        """Forget every position at or after `length` (an absolute length, not a count to remove)."""
        if length < 0 or length > self.length:
            raise ValueError(f"cannot crop a draft cache of length {self.length} to {length}")
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def contents(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values `[1, H_kv, length, head_dim]` (views)."""
        if self._keys is None:
            raise ValueError("the draft cache is empty")
        return self._keys[..., : self.length, :], self._values[..., : self.length, :]
