"""Ten compiled one-token steps of the 0.5B (bf16, fast kernels, a 200-token static cache of 264 slots) under
torch.profiler: where a compiled step's time goes (#91). Output: ../profile_05b.txt."""

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, StaticCache

import hf_dynaspec
from hf_dynaspec import zoo

model = AutoModelForCausalLM.from_pretrained(zoo.resolve_model_path("qwen2.5-coder-0.5b-instruct"),
                                             dtype=torch.bfloat16).eval()
hf_dynaspec.fast_cpu(model, compile=False)
ids = torch.randint(0, 1000, (1, 200))
static = StaticCache(config=model.config, max_cache_len=264)
token = torch.tensor([[5]])
with torch.inference_mode():
    model(input_ids=ids, past_key_values=static, cache_position=torch.arange(200), use_cache=True)


def body():
    return model(input_ids=token, past_key_values=static, cache_position=torch.tensor([200]), use_cache=True).logits


step = torch.compile(body, fullgraph=True, dynamic=False)


def one_step():
    for layer in static.layers:  # transformers 5.2x's static layers write at their own running length
        layer.cumulative_length.fill_(200)
    return step()


with torch.inference_mode():
    for _ in range(3):
        one_step()
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(10):
            one_step()
print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
