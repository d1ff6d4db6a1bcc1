"""Base model of every spec section: frozen, unknown keys rejected."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A frozen spec section that rejects unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
