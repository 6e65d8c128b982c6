"""The package's exception types (a leaf module: every layer raises them, none is imported to get one)."""


class ArtifactError(ValueError):
    """An assistant artifact is missing, corrupt, unsafe or not recognised."""


class IntegrityError(ValueError):
    """The artifact's files are not what was saved."""


class AssistantMismatchError(ValueError):
    """The assistant was built for a different target."""


class UnsupportedTargetError(ValueError):
    """The target's family has no decoder-layer classes a drafter can mirror."""


def require_model(value, name: str) -> None:
    """Raise a TypeError naming `name` unless `value` is a transformers model (a module with the LM head accessor
    every PreTrainedModel has)."""
    if not hasattr(value, "get_output_embeddings") or not hasattr(value, "parameters"):
        raise TypeError(f"{name} must be a transformers model (a PreTrainedModel, e.g. AutoModelForCausalLM."
                        f"from_pretrained(...)), got {type(value).__name__}: load the model first and pass it")
