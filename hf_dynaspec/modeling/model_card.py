"""Model cards (README.md) for assistant artifacts, with huggingface_hub's ModelCard: the text is a Jinja template
(card_templates/assistant.md, medusa.md) that ModelCard renders.

What the card says comes from the artifact itself: its config (target, drafter kind, shortlist components)
and `card.json`, which the recipes fill with how the artifact was made (`training`: data, tokens, steps, wall
time, commands) and what it measured (`results`: an `hf-dynaspec bench` report). Nothing is invented: a
card without measurements says that none were recorded.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hf_dynaspec.modeling.checkpoints import read_json_object

CARD_DATA_NAME = "card.json"


def read_card_data(directory: Path) -> dict:
    return read_json_object(Path(directory) / CARD_DATA_NAME) or {}


def _results_table(results: dict) -> str:
    rows = ["| method | tau | avg shortlist | speedup | exact |", "| --- | ---: | ---: | ---: | --- |"]
    for key, m in results.get("methods", {}).items():
        tau = "-" if m.get("tau") is None else f"{m['tau']:.2f}"
        shortlist = "-" if m.get("avg_shortlist") is None else f"{m['avg_shortlist']:,.0f}"
        speedup = "-" if m.get("speedup") is None else f"{m['speedup']:.2f}x"
        rows.append(f"| {key} | {tau} | {shortlist} | {speedup} | {'yes' if m.get('exact') else 'no'} |")
    header = (f"Measured with `hf-dynaspec bench` on {results.get('n_prompts', '?')} prompts, "
              f"{results.get('max_new_tokens', '?')} new tokens, {results.get('dtype', '?')} on "
              f"{results.get('device', '?')}, greedy, batch 1.")
    command = results.get("command")
    return header + "\n\n" + "\n".join(rows) + (f"\n\nCommand:\n\n```bash\n{command}\n```" if command else "")


def _value_text(value) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() or abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _bullets(record, indent: str = "") -> list[str]:
    """A JSON record as nested markdown bullets (dicts by key, lists item by item)."""
    lines = []
    items = record.items() if isinstance(record, dict) else enumerate(record, start=1)
    for key, value in items:
        if isinstance(value, (dict, list)) and value:
            lines.append(f"{indent}- {key}:")
            lines += _bullets(value, indent + "  ")
        else:
            lines.append(f"{indent}- {key}: {_value_text(value)}")
    return lines


def _training_text(training) -> str:
    """The `training` record of card.json: bullets, with command lines (`commands`/`command`) as a bash block."""
    if not isinstance(training, dict):
        return "No training record was stored with this artifact."
    commands = [training[k] for k in ("commands", "command") if isinstance(training.get(k), str)]
    text = "\n".join(_bullets({k: v for k, v in training.items() if k not in ("commands", "command")}))
    if commands:
        text += "\n\nCommands:\n\n```bash\n" + "\n".join(c.strip() for c in commands) + "\n```"
    return text.strip()


def render_model_card(config, options, card_data: dict) -> str:
    """README.md text for an assistant with `config` (DynaSpecConfig) and `card_data` (see module docstring)."""
    kind = {"eagle": "EAGLE-1/2 (one decoder layer on the target's last hidden state)",
            "eagle3": "EAGLE-3 (fused low/mid/high target layers)"}[config.drafter_kind]
    if config.drafter_kind == "eagle" and config.fused_hidden_state_ids:
        kind = (f"EAGLE-1/2 (one decoder layer) on the target's last hidden state fused with its hidden_states"
                f"{config.fused_hidden_state_ids}")
    return _rendered("assistant.md", config, card_data, ["eagle", "dynaspec", config.drafter_kind], kind=kind,
                     options=options)


def render_medusa_card(config, card_data: dict) -> str:
    """README.md text for Medusa heads (`MedusaConfig`), from `card_data` as for assistants."""
    return _rendered("medusa.md", config, card_data, ["medusa"])


def _rendered(template: str, config, card_data: dict, tags: list[str], **values) -> str:
    """The card from its Jinja template (card_templates/, package data), rendered by huggingface_hub's ModelCard:
    the metadata (the target as base model where it is a Hub id, `tags`, card_data's licence) as the YAML header,
    the config (what the template says of the components), the target, vocabulary, training record, results and
    `values` in the body."""
    from huggingface_hub import ModelCard, ModelCardData

    target = config.target_name_or_path or "unknown"
    metadata = ModelCardData(library_name="hf-dynaspec", tags=["speculative-decoding", *tags],
                             base_model=target if "/" in target and not target.startswith(("/", ".")) else None,
                             license=card_data.get("license"))
    results = card_data.get("results")
    values.update(config=config, target=target, training=_training_text(card_data.get("training")),
                  results=_results_table(results) if results else "No measurements were recorded with this artifact.")
    text = resources.files("hf_dynaspec.modeling").joinpath("card_templates", template).read_text()
    return str(ModelCard.from_template(metadata, template_str=text, **values))
