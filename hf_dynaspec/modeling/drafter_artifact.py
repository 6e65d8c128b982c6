"""`DrafterArtifact`: what every drafter artifact (`DynaSpecAssistant`, `MedusaAssistant`) shares as a
`PreTrainedModel`: its checked weights, its files, its attachment to a target and its statistics.

Files: config.json and model.safetensors (transformers), generation_config.json (how it drafts by default),
checksums.json (the weights' sha256, checked at load), card.json (how it was made and what it measured) and the
README model card rendered from them. The target is a plain attribute, never a submodule: it is never saved nor
moved with the artifact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import PreTrainedModel

from hf_dynaspec.errors import ArtifactError
from hf_dynaspec.modeling import checkpoints, integrity, model_card
from hf_dynaspec.stats import DraftStats, latest_stats


class DrafterArtifact(PreTrainedModel):
    main_input_name = "input_ids"
    # What a direct call is told to do instead (each kind names its route).
    use_instead = "model.generate(..., custom_generate=hf_dynaspec.speculative_generate, drafter=...)"

    def __init__(self, config):
        super().__init__(config)
        # How the artifact was made and what it measured (card.json): the model card is rendered from it.
        self.card_data: dict = {}
        self.__dict__["_target"] = None

    @property
    def target(self) -> PreTrainedModel | None:
        return self.__dict__["_target"]

    @property
    def stats(self) -> DraftStats:
        """Acceptance statistics of the last generate() call (read-only; held outside the artifact)."""
        return latest_stats(self)

    def model_card(self) -> str:
        """The README.md text (each kind renders its own)."""
        raise NotImplementedError

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """config.json and model.safetensors (transformers), generation_config.json, checksums.json, card.json (when
        there is card data) and the README model card."""
        super().save_pretrained(save_directory, *args, **kwargs)
        directory = Path(save_directory)
        self.generation_config.save_pretrained(directory)  # PreTrainedModel saves it only for generating models
        integrity.write_checksums(directory)
        if self.card_data:
            (directory / model_card.CARD_DATA_NAME).write_text(json.dumps(self.card_data, indent=2) + "\n")
        (directory / "README.md").write_text(self.model_card())

    def _load_checked(self, state: dict[str, torch.Tensor], directory) -> None:
        """Load `state` after checking it holds exactly this config's tensors, in their shapes, all finite; the
        stored dtype is kept (a round trip is bit-exact)."""
        expected = self.state_dict()
        # Empty components (a published checkpoint's shortlists or token maps) need no stored tensor.
        state = {**{k: v for k, v in expected.items() if v.numel() == 0}, **state}
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(set(state) - set(expected))
        wrong_shape = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
        details = [f"missing {missing[:8]}"] if missing else []
        details += [f"unexpected {unexpected[:8]}"] if unexpected else []
        details += ["wrong shape " + ", ".join(f"{k} {tuple(state[k].shape)} != {tuple(expected[k].shape)}"
                                              for k in wrong_shape[:4])] if wrong_shape else []
        if details:
            raise ArtifactError(
                f"The weights in {directory} do not match its config ({'; '.join(details)}). "
                "The artifact is corrupt or was written by an incompatible version; re-save or re-download it."
            )
        broken = integrity.non_finite_tensors(state)
        if broken:
            raise ArtifactError(
                f"The weights in {directory} hold NaN or inf values ({', '.join(broken[:6])}): a diverged training "
                "run or a corrupted file. Use an earlier checkpoint or retrain; such a drafter would draft nothing "
                "useful."
            )
        self.load_state_dict(state, strict=True, assign=True)

    def generate(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} does not generate by itself: {self.use_instead}")

    def forward(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is not called directly: {self.use_instead}")


def read_generation_json(directory: Path) -> dict | None:
    """The artifact's generation_config.json as a dict (None when it has none), refused with the fix when it is
    not a JSON object."""
    stored = checkpoints.read_json_object(Path(directory) / "generation_config.json")
    if stored is not None:
        stored.pop("transformers_version", None)
    return stored
