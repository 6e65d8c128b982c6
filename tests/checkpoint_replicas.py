"""Replicas of the published EAGLE checkpoint layouts (file names, key names, config fields), random weights.

Used by the tests (tests/test_checkpoints.py, tests/test_public_checkpoints.py) and by CI's smoke run of the
README's `hf-dynaspec convert` in a user's venv (.ci/user_commands.sh), so this module imports no test framework.
"""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file


def llama_style_config(target, **extra) -> dict:
    text = target.config
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size,
        "num_attention_heads": text.num_attention_heads,
        "num_key_value_heads": text.num_key_value_heads,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "hidden_act": "silu",
        "vocab_size": text.vocab_size,
    }
    config.update(extra)
    return config


def save_weights(state: dict, directory, fmt: str) -> None:
    """As the published repositories ship them: model.safetensors, or pytorch_model.bin (torch.save)."""
    directory.mkdir(exist_ok=True)
    if fmt == "bin":
        torch.save(state, directory / "pytorch_model.bin")
    else:
        save_file(state, str(directory / "model.safetensors"))


def eagle1_checkpoint(directory, target, bias=True, qkv_bias=False, fmt="safetensors", config_bias_key=True,
                      **config_extra):
    """EAGLE-1/2's layout (SafeAILab/EAGLE eagle/model/cnets1.py): fc [+ bias], one layer without input norm,
    q/k/v biases when the config says `qkv_bias`, the target's embedding copied in."""
    hidden, inter = target.config.hidden_size, target.config.intermediate_size
    kv = target.config.num_key_value_heads * hidden // target.config.num_attention_heads
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    state = {
        "fc.weight": rand(hidden, 2 * hidden),
        "layers.0.self_attn.q_proj.weight": rand(hidden, hidden),
        "layers.0.self_attn.k_proj.weight": rand(kv, hidden),
        "layers.0.self_attn.v_proj.weight": rand(kv, hidden),
        "layers.0.self_attn.o_proj.weight": rand(hidden, hidden),
        "layers.0.post_attention_layernorm.weight": torch.ones(hidden),
        "layers.0.mlp.gate_proj.weight": rand(inter, hidden),
        "layers.0.mlp.up_proj.weight": rand(inter, hidden),
        "layers.0.mlp.down_proj.weight": rand(hidden, inter),
        "embed_tokens.weight": rand(target.config.vocab_size, hidden),  # some uploads carry it; it is borrowed
    }
    if bias:
        state["fc.bias"] = rand(hidden)
    if qkv_bias:
        for name, rows in (("q", hidden), ("k", kv), ("v", kv)):
            state[f"layers.0.self_attn.{name}_proj.bias"] = rand(rows)
        config_extra["qkv_bias"] = True
    save_weights(state, directory, fmt)
    if config_bias_key:  # EAGLE's loader (ea_model.py) takes fc's bias as true when the key is absent
        config_extra["bias"] = bias
    (directory / "config.json").write_text(json.dumps(llama_style_config(target, **config_extra)))
    return state


def eagle3_checkpoint(directory, target, draft_vocab=40, vllm_names=False, with_d2t=True, layer_ids=(0, 1, 2),
                      fmt="safetensors", embed=False, **config_extra):
    hidden, inter = target.config.hidden_size, target.config.intermediate_size
    kv = target.config.num_key_value_heads * hidden // target.config.num_attention_heads
    generator = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    layer = "layers.0." if vllm_names else "midlayer."
    target_ids = torch.arange(0, 2 * draft_vocab, 2)
    state = {
        "fc.weight": rand(hidden, 3 * hidden),
        layer + "hidden_norm.weight": torch.ones(hidden),
        layer + "input_layernorm.weight": torch.ones(hidden),
        layer + "post_attention_layernorm.weight": torch.ones(hidden),
        layer + "self_attn.q_proj.weight": rand(hidden, 2 * hidden),
        layer + "self_attn.k_proj.weight": rand(kv, 2 * hidden),
        layer + "self_attn.v_proj.weight": rand(kv, 2 * hidden),
        layer + "self_attn.o_proj.weight": rand(hidden, hidden),
        layer + "mlp.gate_proj.weight": rand(inter, hidden),
        layer + "mlp.up_proj.weight": rand(inter, hidden),
        layer + "mlp.down_proj.weight": rand(hidden, inter),
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": rand(draft_vocab, hidden),
    }
    if with_d2t:
        state["draft_id_to_target_id" if vllm_names else "d2t"] = target_ids - torch.arange(draft_vocab)
        t2d = torch.zeros(target.config.vocab_size, dtype=torch.bool)
        t2d[target_ids] = True
        state["t2d"] = t2d
    if embed:  # SpecForge's LlamaForCausalLMEagle3 saves its (frozen, target-copied) embedding too
        state["embed_tokens.weight"] = rand(target.config.vocab_size, hidden)
    save_weights(state, directory, fmt)
    eagle_config = {"eagle_aux_hidden_state_layer_ids": list(layer_ids)} if layer_ids is not None else None
    config = llama_style_config(target, draft_vocab_size=draft_vocab, **config_extra)
    if eagle_config:
        config["eagle_config"] = eagle_config
    (directory / "config.json").write_text(json.dumps(config))
    return state
