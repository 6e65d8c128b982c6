"""Build an assistant's shortlist components for a target: FR-Spec list, vocabulary clusters, router.

    python -m recipes.build_shortlists --target qwen2.5-coder-0.5b-instruct --out assistants/qwen05-shortlists \
        --clusters 256 --router-tokens 12000

- FR-Spec ranking: token counts over the training responses (`--data`, the user's; by default this repository's
  ../shared/data/train), chat-formatted where the tokenizer has a template.
- Always-included ids: the tokenizer's special tokens and the generation config's EOS ids, plus with
  `--core-frequent N` the N most frequent tokens of the FR-Spec ranking: a small frequent core that every
  DynaSpec shortlist scores, so that the router's clusters only have to cover the long tail.
- Clusters: spherical k-means over the target's LM-head rows (scikit-learn), C = --clusters. With
  `--max-cluster-size S` no cluster holds more than S tokens (each goes to its most similar centroid with room);
  `--balanced` sets S to the smallest that fits, ceil(tokens / C): clusters of (nearly) equal size.
- Router: trained on (E(x_t), h_{t-1}) -> cluster of the target's next token. At the first draft position
  h is the target's own last hidden state f; deeper, it is the drafter's prediction. With `--features`
  (shards of recipes/build_features.py) both kinds of examples come from the cache without running the
  target: (E(x_{t+1}), f_t) and, through one pass of the drafter, (E(x_{t+2}), p_{t+1}); without it, the
  target runs over `--router-tokens` tokens of conversations (first-position examples only). Top-k recall
  on a held-out tenth is printed and stored in `shortlist_metrics.json`.
The drafter is taken from --assistant, or a fresh untrained one is created.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.selector import row_places
from hf_dynaspec.loading import load_target
from hf_dynaspec.modeling.shortlist import ClusterRouter, balanced_cluster_size, cluster_vocabulary, ranking_from_counts
from hf_dynaspec.modeling.shortlist.frequency import count_tokens
from recipes.conversations import conversations, tokenize
from recipes.user_data import add_data_arguments


def always_included_ids(tokenizer, model) -> list[int]:
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    return sorted(set(tokenizer.all_special_ids) | set(eos))


@torch.no_grad()
def router_examples(model, tokenizer, cluster_of_token, num_tokens, max_length=512, data=None, split="train"):
    """(E(x_t) [N, D], f_{t-1} [N, D], cluster of the target's greedy next token [N])."""
    embeds, feats, labels, total = [], [], [], 0
    progress = tqdm(total=num_tokens, unit="tok", desc="router data")
    for prompt, response in conversations(data, split):
        ids, _ = tokenize(tokenizer, prompt, response, max_length)
        ids = torch.tensor(ids)[None]
        out = model(input_ids=ids, output_hidden_states=-1)
        hidden = out.hidden_states[-1][0].float()  # [T, D]; f_t predicts x_{t+1}
        next_ids = out.logits[0].argmax(-1)  # the target's own next token after position t
        # position t >= 1: inputs E(x_t), f_{t-1}; label: cluster of the target's token after x_t.
        embeds.append(model.get_input_embeddings()(ids[0, 1:]).float())
        feats.append(hidden[:-1])
        labels.append(cluster_of_token[next_ids[1:]])
        total += ids.shape[1] - 1
        progress.update(ids.shape[1] - 1)
        if total >= num_tokens:
            break
    progress.close()
    return torch.cat(embeds), torch.cat(feats), torch.cat(labels)


def interleaved_sequences(shards: list[Path], fused: bool):
    """The shards' sequences, one from each features directory in turn.

    The router is fit on a token budget usually smaller than all the features. Read in the order given, the
    budget would be spent on the first directory alone (one domain, such as task-format answers) and the
    router would learn that domain's clusters only; taking the directories in turn spreads it over all."""
    from recipes.training_data import load_sequences

    by_directory: dict[Path, list[Path]] = {}
    for shard in shards:
        by_directory.setdefault(shard.parent, []).append(shard)
    streams = [(s for shard in group for s in load_sequences(shard, fused)) for group in by_directory.values()]
    for turn in itertools.zip_longest(*streams):
        yield from (sequence for sequence in turn if sequence is not None)


@torch.no_grad()
def router_examples_from_features(features: list[Path], drafter, cluster_of_token, num_tokens: int):
    """Router examples from cached shards: first-position ones on target features, second-position ones on
    the drafter's own predictions (half each). Sequences are taken from each features directory in turn
    (see interleaved_sequences). Returns (E [N, D], h [N, D], cluster [N])."""
    from recipes.training_data import collate, feature_shards
    from recipes.training_objective import draft_pass, drafter_features

    embeds, feats, labels, total = [], [], [], 0
    progress = tqdm(total=num_tokens, unit="tok", desc="router data (cached features)")
    fused_ids = drafter.config.fused_hidden_state_ids
    sequences = interleaved_sequences(feature_shards(features, fused_ids), bool(fused_ids))
    dtype = drafter.fc.weight.dtype
    for sequence in sequences:
        if total >= num_tokens:
            break
        batch = collate([sequence], "cpu")
        ids, top = batch.input_ids[0], batch.topk_ids[0, :, 0]
        # The router's first-position input is the drafter's feature of the last verified position (fused, for
        # drafters that fuse target layers), exactly what ChainDraftSession hands it.
        hidden = drafter_features(drafter, batch).float()  # [1, T, D]
        token_embeds = drafter.embed(ids[1:])[None].float()
        predicted = draft_pass(drafter, token_embeds.to(dtype), hidden[:, :-1].to(dtype)).float()
        # position 0: (E(x_{t+1}), f_t) -> target's token after x_{t+1}
        embeds.append(token_embeds[0])
        feats.append(hidden[0, :-1])
        labels.append(cluster_of_token[top[1:]])
        # position 1: (E(x_{t+2}), p_{t+1}) -> target's token after x_{t+2}
        embeds.append(token_embeds[0, 1:])
        feats.append(predicted[0, :-1])
        labels.append(cluster_of_token[top[2:]])
        total += 2 * len(ids) - 3
        progress.update(2 * len(ids) - 3)
    progress.close()
    return torch.cat(embeds), torch.cat(feats), torch.cat(labels)


@torch.no_grad()
def vocabtrim_ranking(assistant, model, tokenizer, num_prompts: int, max_new_tokens: int, data=None,
                      split="train") -> torch.Tensor:
    """VocabTrim: token ids ranked by how often the drafter itself drafts them on training prompts (greedy)."""
    from hf_dynaspec.loading import encode_prompt
    from hf_dynaspec.modeling.shortlist.frequency import count_tokens

    assistant.collect_draft_tokens = True
    drafted = []
    for prompt, _ in tqdm(itertools.islice(conversations(data, split), num_prompts), total=num_prompts, desc="vocabtrim"):
        ids = encode_prompt(tokenizer, prompt, None)  # chat template where the tokenizer has one
        model.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, do_sample=False,
                       max_new_tokens=max_new_tokens)
        drafted.extend(t.tolist() for t in assistant.stats.draft_token_ids)
    assistant.collect_draft_tokens = False
    return ranking_from_counts(count_tokens(drafted, assistant.config.vocab_size))


def budget_coverage(cluster_scores, labels, cluster_sizes, num_always: int, k: int) -> dict:
    """With the top-k clusters plus the always-scored rows: how often is the target's token covered, at what size.

    labels `[N]` (-1: an always-scored token), cluster_scores `[N, C]`, cluster_sizes `[C]`.
    """
    top = cluster_scores.topk(k, dim=-1).indices
    covered = (labels < 0) | (top == labels[:, None]).any(-1)
    rows = cluster_sizes[top].sum(-1) + num_always
    return {"coverage": covered.float().mean().item(), "avg_rows": rows.float().mean().item()}


def coverage_at_rows(cluster_scores, next_tokens, clusters, budgets=(1024, 2048, 4096, 8192, 16384, 32768)) -> dict:
    """The DynaSpec rule's coverage at each row budget R (the first R rows of the router's ranking, clusters
    frequency-ordered as at load, plus the always-included rows): the fraction of `next_tokens` [N] scored.
    Comparable across cluster counts and sizes, which coverage at k clusters is not."""
    places = row_places(cluster_scores, next_tokens, clusters)
    return {rows: ((places < rows) | (places < 0)).float().mean().item() for rows in budgets
            if rows <= len(clusters.token_order)}


def train_router(router, embeds, feats, labels, epochs=20, lr=2e-3, batch=512, seed=0, cluster_sizes=None,
                 num_always=0, next_tokens=None, clusters=None):
    """Fit `router` on (E [N, D], h [N, H]) -> cluster `labels` [N] (-1: always-included), a tenth held out;
    with `next_tokens` [N] and the frequency-ordered `clusters`, also the held-out coverage at row budgets."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=generator)
    held_out, train = order[: len(order) // 10], order[len(order) // 10 :]
    optimizer = torch.optim.AdamW(router.parameters(), lr=lr, weight_decay=0.01)
    router.float().train()
    for _ in tqdm(range(epochs), desc="router epochs"):
        for chunk in train[torch.randperm(len(train), generator=generator)].split(batch):
            loss = ClusterRouter.loss(router(embeds[chunk], feats[chunk]), labels[chunk])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    router.eval()
    with torch.no_grad():
        scores = router(embeds[held_out], feats[held_out])
        metrics = {f"top{k}_recall": ClusterRouter.top_k_recall(scores, labels[held_out], k)
                   for k in (1, 4, 8, 16, 32) if k <= scores.shape[-1]}
        metrics["held_out_loss"] = ClusterRouter.loss(scores, labels[held_out]).item()
        if cluster_sizes is not None:
            metrics["always_scored_fraction"] = (labels[held_out] < 0).float().mean().item()
            metrics["coverage_at_k"] = {k: budget_coverage(scores, labels[held_out], cluster_sizes, num_always, k)
                                        for k in (4, 8, 16, 32, 64) if k <= scores.shape[-1]}
        if next_tokens is not None:
            metrics["coverage_at_rows"] = coverage_at_rows(scores, next_tokens[held_out], clusters)
    metrics.update(train_examples=len(train), held_out_examples=len(held_out))
    return metrics


def check_arguments(parser, args) -> None:
    """Refuse, before the target is loaded and before anything is written, what cannot give shortlists: argparse's
    error (exit 2) names the option and the fix."""
    for name in ("clusters", "router_tokens", "router_hidden", "max_cluster_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.core_frequent < 0:
        parser.error(f"--core-frequent must be 0 or more, got {args.core_frequent}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file: name a directory for the assistant with its shortlists")
    missing = [str(path) for path in args.features or [] if not path.is_dir()]
    if missing:
        parser.error(f"--features: no such directory {', '.join(missing)} (made by python -m recipes.build_features)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", default=None, help="existing assistant to add shortlists to")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--clusters", type=int, default=256)
    size_cap = parser.add_mutually_exclusive_group()
    size_cap.add_argument("--max-cluster-size", type=int, default=None,
                          help="no cluster holds more tokens than this (default: k-means' own sizes)")
    size_cap.add_argument("--balanced", action="store_true",
                          help="clusters of equal size: the cap is ceil(clustered tokens / --clusters)")
    parser.add_argument("--frequency-conversations", type=int, default=None,
                        help="count tokens over only the first N training conversations (default: all)")
    parser.add_argument("--core-frequent", type=int, default=0,
                        help="the N most frequent tokens are kept out of the clusters and always scored")
    parser.add_argument("--router-tokens", type=int, default=12000)
    parser.add_argument("--features", type=Path, default=None, nargs="+",
                        help="cached target features (recipes.build_features), one or more directories read in "
                             "order, to train the router from")
    parser.add_argument("--router-hidden", type=int, default=256)
    parser.add_argument("--vocabtrim-prompts", type=int, default=0,
                        help="training prompts to draft on for the VocabTrim list (0: skip; needs a trained drafter)")
    parser.add_argument("--vocabtrim-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    add_data_arguments(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)

    model, tokenizer = load_target(args.target, "fp32")
    assistant = (DynaSpecAssistant.from_pretrained(args.assistant, target=model) if args.assistant
                 else DynaSpecAssistant.from_target(model))
    vocab = assistant.config.vocab_size
    if args.clusters > vocab:
        parser.error(f"--clusters {args.clusters} is more than the target's {vocab} tokens: ask for fewer")
    metrics = {}

    start = time.perf_counter()
    pairs = conversations(args.data, args.split)
    if args.frequency_conversations is not None:
        pairs = itertools.islice(pairs, args.frequency_conversations)
    responses = (tokenize(tokenizer, p, r, 1024) for p, r in pairs)
    counts = count_tokens((ids[begin:] for ids, begin in responses), vocab)
    ranking = frspec_ranking = ranking_from_counts(counts)
    assistant.shortlists.set_frequency_list(ranking, kind="frspec")
    metrics["frspec"] = {"ranked_tokens": len(ranking), "counted_tokens": int(counts.sum()),
                         "seconds": time.perf_counter() - start}

    if args.vocabtrim_prompts:
        start = time.perf_counter()
        ranking = vocabtrim_ranking(assistant, model, tokenizer, args.vocabtrim_prompts, args.vocabtrim_new_tokens,
                                     args.data, args.split)
        assistant.shortlists.set_frequency_list(ranking, kind="vocabtrim")
        metrics["vocabtrim"] = {"ranked_tokens": len(ranking), "seconds": time.perf_counter() - start}

    start = time.perf_counter()
    head = model.get_output_embeddings().weight.detach()
    always = sorted(set(always_included_ids(tokenizer, model)) | set(frspec_ranking[: args.core_frequent].tolist()))
    max_size = balanced_cluster_size(len(head) - len(always), args.clusters) if args.balanced else args.max_cluster_size
    clusters = cluster_vocabulary(head, args.clusters, always_ids=always, seed=args.seed, max_cluster_size=max_size)
    assistant.shortlists.set_clusters(clusters, router_hidden_size=args.router_hidden)
    sizes = clusters.offsets.diff().float()
    metrics["clusters"] = {"num_clusters": clusters.num_clusters, "always_ids": len(clusters.always_ids), "max_size": max_size,
                           "size_min": sizes.min().item(), "size_median": sizes.median().item(),
                           "size_max": sizes.max().item(), "seconds": time.perf_counter() - start}

    start = time.perf_counter()
    token_ids = torch.arange(vocab)  # as "cluster of token": the examples come labelled with the next token
    if args.features is not None:
        embeds, feats, next_tokens = router_examples_from_features(args.features, assistant.drafter, token_ids,
                                                                   args.router_tokens)
    else:
        embeds, feats, next_tokens = router_examples(model, tokenizer, token_ids, args.router_tokens, data=args.data,
                                                     split=args.split)
    labels = clusters.cluster_of_token(vocab)[next_tokens]
    metrics["router"] = train_router(assistant.shortlists.router, embeds, feats, labels, seed=args.seed,
                                     cluster_sizes=clusters.offsets.diff(), num_always=len(clusters.always_ids),
                                     next_tokens=next_tokens, clusters=clusters.frequency_ordered(frspec_ranking))
    metrics["router"]["seconds"] = time.perf_counter() - start
    print(json.dumps(metrics, indent=2))

    assistant.shortlists.router.to(assistant.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    assistant.save_pretrained(args.out)
    (args.out / "shortlist_metrics.json").write_text(json.dumps({"command": vars(args) | {"out": str(args.out)},
                                                                  **metrics}, indent=2, default=str))


if __name__ == "__main__":
    main()
