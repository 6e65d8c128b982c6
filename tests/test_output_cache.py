"""modeling.drafter.output_cache: a forward's KV cache under either name, the deprecated one read only as a fallback."""

from __future__ import annotations

import pytest
import torch
from conftest import one_layer_target
from transformers.cache_utils import DynamicCache

from hf_dynaspec.modeling.drafter import output_cache


class _OldNameRefused(dict):
    """An output whose deprecated field must not be read (transformers warns when it is)."""

    def get(self, key, default=None):
        if key == "past_key_values":
            raise AssertionError("read the deprecated past_key_values while cache was there")
        return super().get(key, default)


def test_output_cache_reads_the_new_name_first_and_the_old_one_only_without_it():
    assert output_cache(_OldNameRefused(cache="new", past_key_values="old")) == "new"
    assert output_cache({"past_key_values": "old"}) == "old"  # transformers before 5.24
    assert output_cache({"logits": 0}) is None
    with pytest.raises(AssertionError, match="deprecated"):
        output_cache(_OldNameRefused(past_key_values="old"))  # the fallback does read it


def test_output_cache_finds_a_real_forwards_cache():
    output = one_layer_target("qwen2")(torch.tensor([[1, 2, 3]]), use_cache=True)
    cache = output_cache(output)
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 3
