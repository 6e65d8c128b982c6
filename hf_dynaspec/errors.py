"""The package's exception types (a leaf module: every layer raises them, none is imported to get one)."""


class ArtifactError(ValueError):
    """An assistant artifact is missing, corrupt, unsafe or not recognised."""


class IntegrityError(ValueError):
    """The artifact's files are not what was saved."""


class AssistantMismatchError(ValueError):
    """The assistant was built for a different target."""


class UnsupportedTargetError(ValueError):
    """The target's family has no decoder-layer classes a drafter can mirror."""
