"""Issue 93: how often an assistant's router puts the target's next token among the rows it scores at the first
two draft positions, on cached target features of the dev answers (greedy or sampled), teacher-forced: the coverage
the live run measures, without the planner, the lookups or the draws between versions.

    python benchmarks/recipe93/router_coverage.py --target gemma-3-270m \
        --features outputs/recipe93/dev-gemma-3-270m/dev-s1-feat \
        --assistant v2=assistants/gemma-3-270m --assistant v3b=outputs/recipe93/dev-gemma-3-270m/ship/v3b

For each assistant, at draft positions 1 and 2, at its own row budget there (generation_config's `shortlist_rows`)
and at a few fixed budgets: the share of positions whose next token (the one in the answer: sampled where the answers were
sampled) and whose target argmax are scored. Prints one JSON line per assistant.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from hf_dynaspec import DynaSpecAssistant, zoo
from hf_dynaspec.drafting.selector import row_places
from recipes.training_data import collate, feature_shards, load_sequences
from recipes.training_objective import draft_pass, drafter_features

BUDGETS = (1024, 4096, 8192, 16384)


@torch.no_grad()
def position_examples(assistant, features: list[Path], max_tokens: int, position: int):
    """Router inputs and labels at draft position `position` (0: (E(x_{t+1}), f_t), the target's feature; 1:
    (E(x_{t+2}), p_{t+1}), the drafter's own prediction, as build_shortlists trains them): (embeds [N, D],
    features [N, H], the next token in the answer [N], the target's argmax there [N])."""
    drafter = assistant.drafter
    embeds, feats, answer, argmax, total = [], [], [], [], 0
    fused = bool(drafter.config.fused_hidden_state_ids)
    for shard in feature_shards(features, drafter.config.fused_hidden_state_ids):
        for sequence in load_sequences(shard, fused):
            if total >= max_tokens:
                break
            batch = collate([sequence], "cpu")
            ids, top = batch.input_ids[0], batch.topk_ids[0, :, 0]
            hidden = drafter_features(drafter, batch).float()
            token_embeds = drafter.embed(ids[1:])[None].float()
            if position == 1:
                hidden = draft_pass(drafter, token_embeds.to(drafter.fc.weight.dtype),
                                    hidden[:, :-1].to(drafter.fc.weight.dtype)).float()
            # example t: the router reads (E(x_{t+1+p}), h_{t+p}) and shortlists the token at t+2+p
            count = len(ids) - 2 - position
            embeds.append(token_embeds[0, position : position + count])
            feats.append(hidden[0, :count])
            answer.append(ids[2 + position :])
            argmax.append(top[1 + position : 1 + position + count])
            total += count
    return torch.cat(embeds), torch.cat(feats), torch.cat(answer), torch.cat(argmax)


def coverage(assistant, features: list[Path], max_tokens: int) -> dict:
    shortlists = assistant.shortlists
    host = shortlists.host_buffers()
    clusters = shortlists.host_clusters().frequency_ordered(host["frequency_ids"])
    router = shortlists.router.float()
    result = {}
    for position in (0, 1):
        embeds, feats, answer, argmax = position_examples(assistant, features, max_tokens, position)
        scores = router(embeds, feats)
        own = assistant.generation_config.shortlist_rows[position]
        result[f"position {position + 1}"] = entry = {"positions": len(answer), "own_rows": own}
        for name, tokens in (("answer", answer), ("argmax", argmax)):
            places = row_places(scores, tokens, clusters)
            for rows in (own, *BUDGETS):
                entry[f"{name}@{rows}"] = round(((places < rows) | (places < 0)).float().mean().item(), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--features", required=True, nargs="+", type=Path)
    parser.add_argument("--assistant", required=True, action="append", help="NAME=DIRECTORY")
    parser.add_argument("--max-tokens", type=int, default=60000)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(zoo.resolve_model_path(args.target), dtype=torch.bfloat16)
    for spec in args.assistant:
        name, directory = spec.split("=", 1)
        assistant = DynaSpecAssistant.from_pretrained(directory, target=model)
        print(json.dumps({"assistant": name, **coverage(assistant, args.features, args.max_tokens)}), flush=True)


if __name__ == "__main__":
    main()
