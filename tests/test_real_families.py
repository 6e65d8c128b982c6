"""Real-model exactness beyond Qwen2: Gemma-3-270M (262,144-row head, sliding layers, tied embeddings; a base model
without a chat template) and SmolLM2-135M-Instruct (llama), both from the offline zoo (marked `real_model`; .ci/run
fetches them). fp32 greedy output is token-identical to plain generate() through both chain routes (`assistant_model=`
and `custom_generate=speculative_generate`) and the tree route, with the shipped assistant as loaded where there is one
(its options included: prompt lookup, the suffix cache; any drafter must be exact, a trained one exercises acceptance)."""

from __future__ import annotations

import pytest
import torch

from hf_dynaspec import DynaSpecAssistant, speculative_generate, zoo
from hf_dynaspec.bench.prompts import encode_prompt
from hf_dynaspec.bench.runner import load_target, shipped_assistant_dir

pytestmark = pytest.mark.real_model

PROMPTS = [
    "def is_palindrome(text: str) -> bool:\n    \"\"\"Return True when text reads the same backwards.\"\"\"\n",
    "Translate to French: The weather is nice today and we are going to the beach.",
]


@pytest.fixture(scope="module", params=["gemma-3-270m", "smollm2-135m-instruct"])
def target(request):
    if zoo.cached_path(request.param) is None:
        pytest.fail(f"{request.param} is not cached: run `hf-dynaspec models fetch {request.param}` (.ci/run does).")
    model, tokenizer = load_target(request.param, "fp32", "cpu")
    shipped = shipped_assistant_dir(request.param)
    if shipped is not None:
        assistant = DynaSpecAssistant.from_pretrained(shipped, target=model)
        assert assistant.generation_config.prompt_lookup_num_tokens > 0  # as shipped: lookups on every route
    else:
        assistant = DynaSpecAssistant.from_target(model)
    return request.param, model, tokenizer, assistant


def test_fp32_greedy_is_identical_by_both_chain_routes_and_by_tree(target):
    name, model, tokenizer, assistant = target
    for text in PROMPTS:
        ids = encode_prompt(tokenizer, text, None)
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=48)
        expected = model.generate(ids, **kwargs)
        chained = model.generate(ids, assistant_model=assistant, **kwargs)
        public = model.generate(ids, custom_generate=speculative_generate, drafter=assistant, **kwargs)
        tree = model.generate(ids, custom_generate=speculative_generate, trees=True, drafter=assistant, **kwargs)
        assert torch.equal(chained, expected), (name, text)
        assert torch.equal(public, expected), (name, text)
        assert torch.equal(tree, expected), (name, text)
