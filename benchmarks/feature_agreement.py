"""Teacher-forced top-1 agreement of drafters with the target on cached feature shards, side by side.

    python benchmarks/feature_agreement.py --target qwen2.5-coder-1.5b-instruct \
        --assistant v8=assistants/qwen2.5-coder-1.5b-instruct \
        --features own=outputs/features/qwen15-own sibling=outputs/features/qwen15-sd7/shard_00000.safetensors \
        --same-prompts

Each `--features LABEL=SOURCE` is a recipes.build_features / self_distill --features-out directory or shard. The
metric is train_drafter's validation (full vocabulary, draft positions 1 .. --depths, all tokens and answer tokens).
With `--same-prompts` only the conversations whose prompt (the tokens before the answer) occurs in every source
are scored: the same questions answered by different writers, e.g. the target itself against a smaller sibling.
With `--categories FILE` (a JSONL with a `category` per row in the sequences' order, e.g. the responses file that
`self_distill --features-out` wrote beside the features) every metric is also reported per category, with the
target's own mean top-1 probability on the answers (`target_top1_prob`): where the target is sure but the drafter
disagrees, the drafter, not the text, is the limit. `--copy-split` adds position-1 agreement on the answer tokens
that repeat a bigram of the text so far and on the others.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.runner import load_target
from recipes.train_drafter import head_top1, teacher_forced_passes, validate
from recipes.training_data import collate, feature_shards, load_sequences, make_batches


def replay_chain(hits: list[list[bool]], k: int, generated: int) -> tuple[int, int]:
    """(tokens, rounds) of greedy chains of `k` over `generated` answer tokens after the first: `hits[d][i]` says
    whether the depth-(d+1) draft of the round whose last accepted token is answer token i equals the target's."""
    position, tokens, rounds = 0, 0, 0
    while position < generated:
        accepted = 0
        while accepted < min(k, generated - position) and hits[accepted][position]:
            accepted += 1
        step = min(accepted + 1, generated - position)  # the accepted drafts and the target's own token
        tokens, rounds, position = tokens + step, rounds + 1, position + step
    return tokens, rounds


@torch.no_grad()
def simulated_chain_tau(drafter, batches, chain_lengths: list[int]) -> dict:
    """Greedy chain tau simulated on teacher-forced answers: per answer, rounds start at the first answer token
    (the prefill's); a round accepts the drafts of positions 1..K while each equals the target's top-1 there and adds
    the target's own token, so tau = mean(accepted + 1). Positions d > 1 come from validate's passes, whose context
    is the drafter's own predicted features at every earlier position (in real drafting only the round's own drafts
    are predicted): an approximation, checked against measured tau in docs/data-curve.md."""
    head = drafter.target.lm_head.weight
    totals = {k: [0, 0] for k in chain_lengths}  # tokens, rounds
    for batch in batches:
        passes = teacher_forced_passes(drafter, batch, max(chain_lengths))
        for row in range(batch.input_ids.shape[0]):
            length = int(batch.valid[row].sum())
            answer = batch.response[row, :length].nonzero()
            if len(answer) < 2:
                continue
            start = int(answer[0])
            hits = []  # padded with misses past the answer's end, where no draft is scored
            for depth, predicted in enumerate(passes):
                guess = head_top1(predicted[row, start - 1 : length - 1 - depth], head)
                hit = (guess == batch.topk_ids[row, start + depth : length, 0]).tolist()
                hits.append(hit + [False] * (length - start - len(hit)))
            for k in chain_lengths:
                tokens, rounds = replay_chain(hits, k, length - 1 - start)
                totals[k][0] += tokens
                totals[k][1] += rounds
    return {f"sim_tau_k{k}": tokens / max(rounds, 1) for k, (tokens, rounds) in totals.items()}


def copyable(input_ids: list[int], labels: list[int]) -> list[bool]:
    """Whether each draft's label could be copied from the text so far: `labels[t]` (the target's token after x_{t+1})
    is copyable when the bigram (x_{t+1}, labels[t]) already occurs in x_0 .. x_t, the way prompt lookup finds it."""
    seen, flags = set(), []
    for t, label in enumerate(labels):
        if t >= 1:
            seen.add((input_ids[t - 1], input_ids[t]))
        flags.append((input_ids[t + 1], label) in seen)
    return flags


@torch.no_grad()
def copy_split(drafter, batches) -> dict:
    """Position-1 agreement on answer tokens split by `copyable`: how much of the answer repeats the text so far
    (summaries, code edits) and whether the drafter gets those repeats, which prompt lookup would."""
    head = drafter.target.lm_head.weight
    hits, counts = {True: 0, False: 0}, {True: 0, False: 0}
    for batch in batches:
        labels = batch.topk_ids[:, 1:, 0]  # [B, T-1]
        scored = batch.valid[:, 1:] & batch.valid[:, :-1] & batch.response[:, 1:]  # validate's answer positions
        flags = torch.tensor([copyable(ids, row) for ids, row in zip(batch.input_ids.tolist(), labels.tolist())])
        hit = head_top1(teacher_forced_passes(drafter, batch, 1)[0][scored], head) == labels[scored]
        for kind in (True, False):
            chosen = flags[scored] == kind
            hits[kind] += int(hit[chosen].sum())
            counts[kind] += int(chosen.sum())
    return {"copyable_share": counts[True] / max(counts[True] + counts[False], 1),
            "top1_1_copyable": hits[True] / max(counts[True], 1), "top1_1_fresh": hits[False] / max(counts[False], 1)}


def processed_probabilities(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Rows of a distribution's largest logits `[N, k]` (sorted, descending) -> the probabilities `[N, k]` that
    transformers' temperature, top-k and top-p warpers leave (0 where they remove a token; top-p as TopPLogitsWarper:
    the smallest-first tokens whose cumulative probability is at most 1 - top_p go, the largest always stays)."""
    kept = logits[:, :top_k] / temperature
    probs = kept.softmax(-1)
    smallest_first = probs.flip(-1).cumsum(-1).flip(-1)  # at column i: the mass of tokens i.. (i and every smaller)
    remove = smallest_first <= 1 - top_p
    remove[:, 0] = False
    probs = probs.masked_fill(remove, 0.0)
    return torch.nn.functional.pad(probs / probs.sum(-1, keepdim=True), (0, logits.shape[1] - kept.shape[1]))


@torch.no_grad()
def sampled_acceptance(drafter, batches, depths: int, settings: tuple[float, int, float]) -> dict:
    """Teacher-forced acceptance of a drawn draft at positions 1 .. `depths` under sampling with `settings`
    (temperature, top-k, top-p): the mean over answer positions of sum_x min(p(x), q(x)), p the target's processed
    distribution, q the drafter's (full-vocabulary logits through the same warpers), what speculative sampling accepts
    a drawn token with. p is read from the features' top-k log-probabilities (the target's largest 16 at temperature
    1: top-k 20 is applied to those 16, which leaves out at most the mass of ranks 17-20); the repetition penalty is
    not applied. Position d > 1 runs on validate's passes (the drafter's own features, teacher-forced tokens)."""
    temperature, top_k, top_p = settings
    head = drafter.target.lm_head.weight
    totals, counts = [0.0] * depths, [0] * depths
    for batch in batches:
        mask = batch.valid[:, 1:] & batch.valid[:, :-1]
        for depth, predicted in enumerate(teacher_forced_passes(drafter, batch, depths)):
            if depth:  # pass d pairs positions whose d earlier pairs are valid too (as validate)
                mask = mask[:, 1:] & mask[:, :-1]
            scored = mask & batch.response[:, depth + 1 :]
            p = processed_probabilities(batch.topk_logp[:, depth + 1 :][scored], temperature, top_k, top_p)
            p_ids = batch.topk_ids[:, depth + 1 :][scored]
            for rows, row_p, row_ids in zip(predicted[scored].split(512), p.split(512), p_ids.split(512)):
                values, ids = (rows @ head.T).float().topk(max(top_k, 1), dim=-1)
                q = processed_probabilities(values, temperature, top_k, top_p)
                # q at p's ids: q is 0 outside its own kept ids
                q_at = torch.where(row_ids[:, :, None] == ids[:, None, :], q[:, None, :], 0.0).sum(-1)
                totals[depth] += float(torch.minimum(row_p, q_at).sum())
                counts[depth] += row_p.shape[0]
    return {f"sampled_accept_{d + 1}": totals[d] / max(counts[d], 1) for d in range(depths)}


def score(drafter, seqs, args) -> dict:
    """validate's agreement (+ simulated chain tau with --chain-tau) on `seqs`, with counts and target confidence."""
    batches = [collate(b, "cpu") for b in make_batches(seqs, args.tokens_per_batch, 0)]
    metrics = validate(drafter, batches, args.depths, args.answers_only)  # no_grad inside
    if args.chain_tau:
        metrics |= simulated_chain_tau(drafter, batches, [int(k) for k in args.chain_tau.split(",")])
    if args.copy_split:
        metrics |= copy_split(drafter, batches)
    if args.sampled:
        temperature, top_k, top_p = args.sampled.split(",")
        metrics |= sampled_acceptance(drafter, batches, args.depths, (float(temperature), int(top_k), float(top_p)))
    answer_top1 = torch.cat([s.topk_logp[s.response][:, 0] for s in seqs]).exp()
    return metrics | {"target_top1_prob": float(answer_top1.mean()), "sequences": len(seqs),
                      "answer_tokens": len(answer_top1)}


def read_categories(path: Path, sequences: dict[str, list]) -> list[str]:
    """The category of each sequence, in order; every --features source must have exactly that many sequences."""
    rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
    missing = [i for i, row in enumerate(rows) if "category" not in row]
    if missing:
        raise SystemExit(f"--categories {path}: row {missing[0]} has no 'category' field")
    for label, seqs in sequences.items():
        if len(seqs) != len(rows):
            raise SystemExit(f"--categories {path} has {len(rows)} rows but --features {label} has {len(seqs)} "
                             "sequences: give the responses file the features were built from, whole")
    return [row["category"] for row in rows]


def built_fused(source: str) -> bool:
    """Whether a --features source (a directory, or a shard in one) was built with fused hidden states: they are
    loaded then, for the fused drafters among the assistants (the others ignore them)."""
    path = Path(source)
    meta = (path if path.is_dir() else path.parent) / "meta.json"
    return meta.is_file() and bool(json.loads(meta.read_text()).get("fused_hidden_state_ids"))


def prompt_key(sequence) -> tuple[int, ...]:
    """The conversation's prompt tokens (everything before the first answer token)."""
    return tuple(sequence.input_ids[~sequence.response].tolist())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", required=True, nargs="+", metavar="LABEL=PATH")
    parser.add_argument("--features", required=True, nargs="+", metavar="LABEL=SOURCE")
    parser.add_argument("--same-prompts", action="store_true")
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--depths", type=int, default=2, help="draft positions scored (1 .. N)")
    parser.add_argument("--chain-tau", default="", help="comma-separated chain lengths K: also simulate greedy "
                        "chain tau on the answers (see simulated_chain_tau)")
    parser.add_argument("--answers-only", action="store_true",
                        help="score answer tokens only (much faster on long prompts; all-token metrics then equal them)")
    parser.add_argument("--copy-split", action="store_true",
                        help="also split position-1 agreement on answers by whether the token repeats a bigram of "
                             "the text so far (see copy_split)")
    parser.add_argument("--sampled", default="", metavar="T,K,P",
                        help="also score acceptance of drawn drafts under temperature T, top-k K, top-p P (the "
                             "target's published settings; see sampled_acceptance)")
    parser.add_argument("--categories", type=Path, default=None,
                        help="JSONL with a 'category' per sequence (in order): also report per category")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.categories and args.same_prompts:
        parser.error("--categories needs every sequence of a source in order: it cannot go with --same-prompts")

    sources = dict(item.split("=", 1) for item in args.features)
    sequences = {label: [s for shard in feature_shards([Path(src)]) for s in load_sequences(shard, built_fused(src))]
                 for label, src in sources.items()}
    if args.same_prompts:
        common = set.intersection(*({prompt_key(s) for s in seqs} for seqs in sequences.values()))
        if not common:
            raise SystemExit("no prompt occurs in every --features source")
        sequences = {label: [s for s in seqs if prompt_key(s) in common] for label, seqs in sequences.items()}
    categories = read_categories(args.categories, sequences) if args.categories else None

    target, _ = load_target(args.target, "fp32")
    results = {}
    for item in args.assistant:
        name, path = item.split("=", 1)
        drafter = DynaSpecAssistant.from_pretrained(path, target=target).drafter.eval()  # fp32, as the target
        if drafter.config.fused_hidden_state_ids:  # the sources must hold the layers it fuses (or a clear error)
            feature_shards([Path(src) for src in sources.values()], drafter.config.fused_hidden_state_ids)
        for label, seqs in sequences.items():
            groups = {"": seqs}
            for category in dict.fromkeys(categories or []):
                groups[f" [{category}]"] = [s for s, c in zip(seqs, categories) if c == category]
            for suffix, group in groups.items():
                metrics = results[f"{name} on {label}{suffix}"] = score(drafter, group, args)
                print(f"{name} on {label}{suffix}: " + ", ".join(
                    f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": vars(args) | {"json": str(args.json)}, "results": results},
                                        indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
