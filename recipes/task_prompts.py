"""Training prompts for the task formats the chat mix lacks: summarization, retrieval QA and translation.

    python -m recipes.task_prompts --target qwen2.5-coder-0.5b-instruct \
        --passages data/self_distill/qwen2.5-coder-0.5b-instruct \
        --out data/task_prompts/qwen2.5-coder-0.5b-instruct.jsonl

`spec_train_prompts.jsonl` is chat, roleplay, code and math. Spec-Bench also measures summarization ("Summarize:
<article>"), RAG (passages, then a question) and translation ("Translate German to English: <sentence>"), and on
those the 0.5B drafter agrees with the target least (benchmarks/results/drafter_agreement_05b_dev.json): it has
never seen a context whose answer copies and condenses a long passage, or renders foreign text. This builds
prompts of those three formats from training-side text only, never from evaluation data:

- passages: the target's own prose answers to training prompts (`--passages`, a self-distillation directory;
  answers without code blocks, at least 600 characters) and GPTeacher roleplay responses (GPT-4, MIT) of at
  least 600 characters;
- summarization: "Summarize: " + one passage;
- RAG: two or three passages, then the training prompt that one of them answers;
- translation (back-translation): English sentences from the GPTeacher roleplay responses are translated into
  German by the target itself (greedy, batched); the prompt asks for the German back in English.

Output: Spec-Bench rows (`question_id`, `category`, `turns`, plus `source` and `license`) in a fixed shuffled
order, ready for `recipes.self_distill --prompts`. The same inputs and seed give the same file.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from recipes.data_paths import shared_data_dir

MIN_PASSAGE_CHARS = 600
MAX_PASSAGE_CHARS = 2400  # ~550 tokens: a whole passage fits `self_distill --max-prompt-tokens 768`
ROLEPLAY_FILE = "gpteacher_roleplay-simple-deduped-roleplay-instruct.json"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def own_answers(directory: Path) -> list[dict]:
    """Prose `{"prompt", "response", "source", "license"}` rows of a self-distillation directory (no code, no
    math worked answers, long enough to be a passage)."""
    rows = []
    for path in sorted(directory.glob("responses_*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            text = row["response"]
            if row["source"] in ("gpteacher-code", "gsm8k") or "```" in text:
                continue
            if MIN_PASSAGE_CHARS <= len(text) <= MAX_PASSAGE_CHARS:
                rows.append({"prompt": row["prompt"], "response": text,
                             "source": f"self-distilled:{row['source']}", "license": row["license"]})
    return rows


def roleplay_responses(data_dir: Path) -> list[dict]:
    """GPTeacher roleplay rows as `{"prompt", "response", "source", "license"}`."""
    rows = json.loads((data_dir / ROLEPLAY_FILE).read_text())
    return [{"prompt": r["instruction"], "response": r["response"].strip(), "source": "gpteacher-roleplay",
             "license": "MIT"} for r in rows if r.get("response")]


def summarization_prompts(passages: list[dict], count: int, rng: random.Random) -> list[dict]:
    chosen = rng.sample(passages, min(count, len(passages)))
    return [{"category": "summarization", "turns": [f"Summarize: {p['response']}"], "source": p["source"],
             "license": p["license"]} for p in chosen]


def rag_prompts(passages: list[dict], count: int, rng: random.Random) -> list[dict]:
    """Two or three passages, one of which answers the question (its own training prompt), in random order."""
    prompts = []
    for answer in rng.sample(passages, min(count, len(passages))):
        others = rng.sample([p for p in passages if p is not answer], rng.choice([1, 2]))
        context = [answer] + others
        rng.shuffle(context)
        text = "\n".join(p["response"] for p in context) + "\n" + answer["prompt"]
        prompts.append({"category": "rag", "turns": [text], "source": answer["source"], "license": answer["license"]})
    return prompts


def english_sentences(responses: list[dict], count: int, rng: random.Random) -> list[str]:
    """Plain sentences of 8-30 words (no markup, no dialogue labels) from the responses."""
    sentences = set()
    for row in responses:
        for sentence in SENTENCE_END.split(row["response"].replace("\n", " ")):
            sentence = sentence.strip()
            if 8 <= len(sentence.split()) <= 30 and not re.search(r"[*#`:<>\[\]]", sentence):
                sentences.add(sentence)
    return rng.sample(sorted(sentences), min(count, len(sentences)))


def translation_prompts(model, tokenizer, sentences: list[str], batch_size: int) -> list[dict]:
    """Back-translation: the target puts each English sentence into German; the prompt asks for it back."""
    from recipes.self_distill import answer_batch

    prompts = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        german = answer_batch(model, tokenizer, [f"Translate English to German: {s}" for s in batch],
                              max_new_tokens=96, max_prompt_tokens=256)
        for source, text in zip(batch, german):
            text = text.strip().split("\n")[0].strip()
            if text and text != source:  # an empty or untranslated answer teaches nothing
                prompts.append({"category": "translation", "turns": [f"Translate German to English: {text}"],
                                "source": "back-translated:gpteacher-roleplay",
                                "license": "MIT (English source); German by the target"})
    return prompts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="translates the English sentences into German")
    parser.add_argument("--passages", required=True, type=Path,
                        help="a self_distill output directory of the target (its prose answers become passages)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--summarization", type=int, default=96)
    parser.add_argument("--rag", type=int, default=96)
    parser.add_argument("--translation", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if not any(args.passages.glob("responses_*.jsonl")):
        raise SystemExit(f"{args.passages} holds no responses_*.jsonl: run recipes.self_distill for the target first")
    data_dir = shared_data_dir() / "train"
    rng = random.Random(args.seed)
    roleplay = roleplay_responses(data_dir)
    passages = own_answers(args.passages) + [r for r in roleplay if MIN_PASSAGE_CHARS <= len(r["response"]) <= MAX_PASSAGE_CHARS]
    rows = summarization_prompts(passages, args.summarization, rng) + rag_prompts(passages, args.rag, rng)
    if args.translation:
        from hf_dynaspec.loading import load_target

        model, tokenizer = load_target(args.target, "fp32")
        rows += translation_prompts(model, tokenizer, english_sentences(roleplay, args.translation, rng), args.batch_size)
    rng.shuffle(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for index, row in enumerate(rows):
            f.write(json.dumps({"question_id": f"task-{index}", **row}) + "\n")
    counts = {c: sum(r["category"] == c for r in rows) for c in ("summarization", "rag", "translation")}
    print(f"wrote {len(rows)} prompts to {args.out}: {counts}")


if __name__ == "__main__":
    main()
