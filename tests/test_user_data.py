"""The recipes read the user's own data (recipes.user_data): every documented row layout gives exactly its
(prompt, response) pairs, from a JSONL/JSON file or a `datasets` dataset; bad rows are named; `--data` reaches
build_features, build_shortlists and self_distill instead of this repository's ../shared data."""

from __future__ import annotations

import json

import pytest

from recipes.conversations import conversations
from recipes.user_data import starter_prompts_path, user_conversations, user_pairs, user_prompts

ROWS = [
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"},
                  {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"},
                  {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q3"}]},
    {"conversations": [{"from": "human", "value": "s1"}, {"from": "gpt", "value": "t1"}]},
    {"instruction": "Sort these", "input": "3 1 2", "output": "1 2 3"},
    {"prompt": "p", "completion": "c"},
    {"question": "2+2?", "answer": "4"},
    {"prompt": "only a prompt"},
]
PAIRS = [("q1", "a1"), ("q2", "a2"), ("q3", None), ("s1", "t1"), ("Sort these\n\n3 1 2", "1 2 3"), ("p", "c"),
         ("2+2?", "4"), ("only a prompt", None)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_row_layout_gives_its_pairs_from_jsonl_and_json(tmp_path):
    assert list(user_pairs(write_jsonl(tmp_path / "d.jsonl", ROWS))) == PAIRS
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    assert list(user_pairs(tmp_path / "d.json")) == PAIRS
    answered = [pair for pair in PAIRS if pair[1]]
    assert list(user_conversations(tmp_path / "d.jsonl")) == answered  # teacher forcing: responses only
    assert list(conversations(tmp_path / "d.jsonl")) == answered  # what the recipes read with --data
    assert [r["prompt"] for r in user_prompts(tmp_path / "d.jsonl")] == [p for p, _ in PAIRS]


def test_datasets_on_disk_and_data_directories_load_like_files(tmp_path):
    datasets = pytest.importorskip("datasets")  # a dev dependency: installed by the README's test command
    flat = [{"prompt": "p1", "response": "r1"}, {"prompt": "p2", "response": "r2"}]
    datasets.Dataset.from_list(flat).save_to_disk(str(tmp_path / "saved"))
    assert list(user_pairs(tmp_path / "saved")) == [("p1", "r1"), ("p2", "r2")]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(flat[:1]), "test": datasets.Dataset.from_list(flat[1:])}
                         ).save_to_disk(str(tmp_path / "dict"))
    assert list(user_pairs(tmp_path / "dict", split="test")) == [("p2", "r2")]
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "train.csv").write_text("prompt,response\np3,r3\n")  # load_dataset infers the csv builder
    assert list(user_pairs(tmp_path / "files")) == [("p3", "r3")]


def test_a_directory_of_jsonl_files_reads_them_in_name_order_without_datasets(tmp_path):
    write_jsonl(tmp_path / "responses_00001.jsonl", ROWS[2:])
    write_jsonl(tmp_path / "responses_00000.jsonl", ROWS[:2])
    assert list(user_pairs(tmp_path)) == PAIRS


def test_bad_data_is_refused_naming_the_row_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"row 1: no prompt found \(keys \['text'\]\).*messages"):
        list(user_pairs(write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x"}, {"text": "y"}])))
    (tmp_path / "b.jsonl").write_text('{"prompt": "x"}\n{broken\n')
    with pytest.raises(ValueError, match=r"b.jsonl:2: not a JSON object"):
        list(user_pairs(tmp_path / "b.jsonl"))
    (tmp_path / "c.txt").write_text("hello")
    with pytest.raises(ValueError, match="give a .jsonl or .json file"):
        list(user_pairs(tmp_path / "c.txt"))
    with pytest.raises(ValueError, match="no row has a response.*self_distill"):
        list(user_conversations(write_jsonl(tmp_path / "d.jsonl", [{"prompt": "x"}])))


def test_self_distill_answers_exactly_the_users_prompts(tmp_path, monkeypatch):
    import recipes.self_distill as self_distill

    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": (None, None))
    monkeypatch.setattr(self_distill, "generate_batch", lambda model, tokenizer, prompts, *args, **kwargs:
                        [self_distill.Answer(p.upper(), [0, 1, 2], 1) for p in prompts])
    monkeypatch.setattr(self_distill, "prompt_lengths", lambda tokenizer, prompts, limit: [len(p) for p in prompts])
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    self_distill.main(["--target", "x", "--out", str(tmp_path / "sd"), "--data", str(data), "--prompts-per-file", "5",
                       "--batch-cost", "1000"])
    written = [json.loads(line) for path in sorted((tmp_path / "sd").glob("responses_*.jsonl"))
               for line in path.read_text().splitlines()]
    assert sorted(r["prompt"] for r in written) == sorted(p for p, _ in PAIRS)
    assert all(r["response"] == r["prompt"].upper() for r in written)


def test_build_features_and_shortlists_read_data_instead_of_the_shared_set(tmp_path, monkeypatch):
    import recipes.build_features as build_features
    import recipes.build_shortlists as build_shortlists

    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    seen = []
    monkeypatch.setattr(build_features, "load_target", lambda *args: (_NoLayers(), None))
    monkeypatch.setattr(build_features, "tokenize", lambda tokenizer, p, r, n: seen.append((p, r)) or ([1, 2, 3], 1))
    monkeypatch.setattr(build_features, "shard_tensors", lambda *args: {})
    monkeypatch.setattr(build_features, "save_file", lambda tensors, path: open(path, "w").close())
    build_features.main(["--target", "x", "--out", str(tmp_path / "f"), "--data", str(data)])
    assert seen == [pair for pair in PAIRS if pair[1]]
    assert json.loads((tmp_path / "f" / "meta.json").read_text())["data"] == str(data)
    with pytest.raises(SystemExit):  # provided responses and self-distilled answers are two different sources
        build_features.main(["--target", "x", "--out", str(tmp_path / "g"), "--data", str(data),
                             "--conversations", str(tmp_path)])

    class Seen(Exception):
        pass

    def record(tokenizer, prompt, response, max_length):
        raise Seen((prompt, response))

    monkeypatch.setattr(build_shortlists, "tokenize", record)
    with pytest.raises(Seen) as first:  # the router's training pairs come from --data too
        build_shortlists.router_examples(None, None, None, num_tokens=10, data=str(data))
    assert first.value.args[0] == PAIRS[0]


class _NoLayers:
    class config:  # noqa: N801 - mimics model.config
        @staticmethod
        def get_text_config():
            return type("Text", (), {"num_hidden_layers": 1})


def test_the_starter_prompts_ship_with_the_package_and_read_as_prompts():
    rows = list(user_prompts(starter_prompts_path()))
    assert len(rows) == 48 and all(r["prompt"].strip() for r in rows)
    assert len({r["prompt"] for r in rows}) == 48
