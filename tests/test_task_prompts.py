"""Task-format training prompts (summarization, RAG, back-translation) and self-distillation from a prompt file."""

from __future__ import annotations

import json
import random

import pytest

from recipes import task_prompts
from recipes.task_prompts import rag_prompts, summarization_prompts


def _passages(n):
    return [{"prompt": f"question {i}?", "response": f"passage {i} " + "word " * 150, "source": "s", "license": "MIT"}
            for i in range(n)]


def test_rag_prompts_hold_the_answering_passage_and_end_with_its_question():
    passages = _passages(10)
    prompts = rag_prompts(passages, 8, random.Random(0))
    assert len(prompts) == 8
    for row in prompts:
        text = row["turns"][0]
        *context, question = text.split("\n")
        index = int(question.split()[1].rstrip("?"))
        assert question == f"question {index}?"
        assert passages[index]["response"] in context  # the passage that answers it is in the context
        assert 2 <= len(context) <= 3 and len(set(context)) == len(context)  # one or two distractors, no repeats
        assert row["category"] == "rag"


def test_summarization_prompts_are_distinct_passages_after_the_instruction():
    passages = _passages(10)
    prompts = summarization_prompts(passages, 6, random.Random(1))
    texts = [row["turns"][0] for row in prompts]
    assert len(set(texts)) == 6
    assert all(t.startswith("Summarize: passage ") for t in texts)


def test_own_answers_keep_long_prose_and_drop_code_math_and_short_answers(tmp_path):
    long_text = "x" * task_prompts.MIN_PASSAGE_CHARS
    rows = [
        {"prompt": "a", "response": long_text, "source": "oasst", "license": "Apache-2.0"},
        {"prompt": "b", "response": "short", "source": "oasst", "license": "Apache-2.0"},
        {"prompt": "c", "response": long_text + "```py\n```", "source": "oasst", "license": "Apache-2.0"},
        {"prompt": "d", "response": long_text, "source": "gsm8k", "license": "MIT"},
        {"prompt": "e", "response": long_text, "source": "gpteacher-code", "license": "MIT"},
    ]
    (tmp_path / "responses_00011.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    kept = task_prompts.own_answers(tmp_path)
    assert [r["prompt"] for r in kept] == ["a"]
    assert kept[0]["source"] == "self-distilled:oasst"


def test_back_translation_asks_for_the_targets_german_in_english(monkeypatch):
    import recipes.self_distill as self_distill

    asked = []

    def fake_answers(model, tokenizer, prompts, max_new_tokens, max_prompt_tokens):
        asked.extend(prompts)
        return ["Der Hund schläft.\nNote: literal", "", prompts[2].split(": ", 1)[1]]

    monkeypatch.setattr(self_distill, "answer_batch", fake_answers)
    rows = task_prompts.translation_prompts(None, None, ["The dog sleeps.", "Empty one.", "Kept as is."], 8)
    assert asked == ["Translate English to German: The dog sleeps.", "Translate English to German: Empty one.",
                     "Translate English to German: Kept as is."]
    # The first line of a translation only; empty and untranslated answers are dropped.
    assert [r["turns"] for r in rows] == [["Translate German to English: Der Hund schläft."]]


def test_self_distillation_answers_a_prompt_file_in_its_order(tmp_path, monkeypatch):
    import recipes.self_distill as self_distill

    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": (None, None))
    monkeypatch.setattr(self_distill, "generate_batch", lambda model, tokenizer, prompts, *args, **kwargs:
                        [self_distill.Answer(p.upper(), [0, 1, 2], 1) for p in prompts])
    monkeypatch.setattr(self_distill, "prompt_lengths", lambda tokenizer, prompts, limit: [len(p) for p in prompts])
    prompt_file = tmp_path / "tasks.jsonl"
    rows = [{"question_id": f"task-{i}", "category": "rag", "turns": [f"prompt {i}"], "source": "s", "license": "MIT"}
            for i in range(5)]
    prompt_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    self_distill.main(["--target", "x", "--out", str(out), "--prompts", str(prompt_file), "--prompts-per-file", "2",
                       "--first-file", "1", "--batch-size", "2", "--batch-cost", "1000"])
    files = sorted(p.name for p in out.glob("responses_*"))
    assert files == ["responses_00001.jsonl", "responses_00002.jsonl"]  # prompts 2-3, then 4
    written = [json.loads(line) for name in files for line in (out / name).read_text().splitlines()]
    assert [w["prompt"] for w in written] == ["prompt 2", "prompt 3", "prompt 4"]
    assert all(w["response"] == w["prompt"].upper() and w["category"] == "rag" for w in written)


def test_self_distillation_refuses_a_prompt_file_without_turns(tmp_path, monkeypatch):
    import recipes.self_distill as self_distill

    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": (None, None))
    prompt_file = tmp_path / "bad.jsonl"
    prompt_file.write_text(json.dumps({"prompt": "no turns here"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not a Spec-Bench row"):
        self_distill.main(["--target", "x", "--out", str(tmp_path / "out"), "--prompts", str(prompt_file)])
