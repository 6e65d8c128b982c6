import time, sys, torch, statistics
from transformers import AutoModelForCausalLM, StaticCache, DynamicCache
import hf_dynaspec
from hf_dynaspec import zoo
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(zoo.cached_path("qwen2.5-coder-0.5b-instruct"), dtype=torch.bfloat16).eval()
handle = hf_dynaspec.fast_cpu(model, compile=False)
ids = torch.randint(0, 1000, (1, 200))
tok = torch.tensor([[5]])
caches = {}
def make(C):
    cache = StaticCache(config=model.config, max_cache_len=C)
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(200), use_cache=True)
    return cache
for C in (256, 512): caches[C] = make(C)
with torch.inference_mode():
    dyn = DynamicCache(config=model.config); model(input_ids=ids, past_key_values=dyn, use_cache=True)
def static_step(cache):
    def f():
        for layer in cache.layers: layer.cumulative_length.fill_(200)
        return model(input_ids=tok, past_key_values=cache, cache_position=torch.tensor([200]), use_cache=True).logits
    return f
def dyn_step():
    n = dyn.get_seq_length() - 200
    if n: dyn.crop(-n)
    return model(input_ids=tok, past_key_values=dyn, use_cache=True).logits
fns = {"eager-dynamic": dyn_step, "eager-static256": static_step(caches[256])}
for C, dynamic in ((256, False), (512, True)):
    inner = static_step(caches[C])
    def body(cache=caches[C]):
        return model(input_ids=tok, past_key_values=cache, cache_position=torch.tensor([200]), use_cache=True).logits
    comp = torch.compile(body, fullgraph=True, dynamic=dynamic)
    def f(comp=comp, cache=caches[C]):
        for layer in cache.layers: layer.cumulative_length.fill_(200)
        return comp()
    t = time.perf_counter()
    with torch.inference_mode(): f()
    print(f"compile C={C}: {time.perf_counter()-t:.1f} s", flush=True)
    fns[f"compiled{C}"] = f
ts = {k: [] for k in fns}
with torch.inference_mode():
    for k, f in fns.items(): f(); f()
    for r in range(40):
        for k, f in fns.items():
            t = time.perf_counter(); f(); ts[k].append(time.perf_counter() - t)
    ref = dyn_step().float(); 
    for k,f in fns.items(): print(k, "max|diff| vs eager-dynamic", (f().float()-ref).abs().max().item())
base = statistics.median(ts["eager-dynamic"])
for k, v in ts.items():
    print(f"{k}: median {statistics.median(v)*1000:.1f} ms  ratio {statistics.median(v)/base:.3f}")
