import torch, time
from transformers import AutoModelForCausalLM, StaticCache
import hf_dynaspec
from hf_dynaspec import zoo
model = AutoModelForCausalLM.from_pretrained(zoo.resolve_model_path("qwen2.5-coder-0.5b-instruct"), dtype=torch.bfloat16).eval()
hf_dynaspec.fast_cpu(model, compile=False)
ids = torch.randint(0, 1000, (1, 200))
static = StaticCache(config=model.config, max_cache_len=264)
with torch.inference_mode():
    model(input_ids=ids, past_key_values=static, cache_position=torch.arange(200), use_cache=True)
tok = torch.tensor([[5]])
def body():
    return model(input_ids=tok, past_key_values=static, cache_position=torch.tensor([200]), use_cache=True).logits
step = torch.compile(body, fullgraph=True, dynamic=False)
def f():
    for l in static.layers: l.cumulative_length.fill_(200)
    return step()
with torch.inference_mode():
    f(); f(); f()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(10): f()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
