from typing import ClassVar, Literal

from pydantic import Field

from pflpipe.spec.algorithms.params import StandaloneParams


class LocalParams(StandaloneParams):
    """Local-only baseline: every client trains alone; its model is chosen on validation."""

    stage: ClassVar[str] = "train_local"
    warm_start: ClassVar[str] = "none"

    name: Literal["local"]
    epochs: int = Field(20, ge=1, description="Training epochs on the client's own data.")
