"""The benchmark harness behind `hf-dynaspec bench` (see harness.py for what is measured and how), and the
acceptance measurement an artifact carries (acceptance.py, run by recipes/measure_acceptance.py)."""

from hf_dynaspec.bench.harness import run_benchmark
from hf_dynaspec.bench.methods import Method, build_methods
from hf_dynaspec.bench.prompts import BenchPrompt, EncodedPrompt, load_prompts

__all__ = ["BenchPrompt", "EncodedPrompt", "Method", "build_methods", "load_prompts", "run_benchmark"]
