"""Uploading an assistant to the Hub with transformers' `push_to_hub` parameters, through huggingface_hub."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def push_artifact(assistant, repo_id: str, *, commit_message: str | None = None, commit_description: str | None = None,
                  private: bool | None = None, token: bool | str | None = None, revision: str | None = None,
                  create_pr: bool = False, max_shard_size: int | str | None = "50GB", tags: list[str] | None = None,
                  endpoint: str | None = None):
    """Save `assistant` to a temporary folder (`save_pretrained`, shards up to `max_shard_size`), add `tags` to its
    model card, and upload the folder as one commit. `endpoint` defaults to $HF_ENDPOINT read at call time (the
    Hub client reads it once, at import). Returns huggingface_hub's CommitInfo (a str: the commit's URL)."""
    from huggingface_hub import HfApi, ModelCard

    api = HfApi(token=token, endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None)
    api.create_repo(repo_id, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        assistant.save_pretrained(folder, max_shard_size=max_shard_size)
        if tags:
            card_path = Path(folder) / "README.md"
            card = ModelCard.load(card_path)
            card.data.tags = list(dict.fromkeys([*(card.data.tags or []), *tags]))
            card.save(card_path)
        return api.upload_folder(
            repo_id=repo_id, folder_path=folder, revision=revision, create_pr=create_pr,
            commit_message=commit_message or "Upload hf-dynaspec assistant", commit_description=commit_description,
        )
