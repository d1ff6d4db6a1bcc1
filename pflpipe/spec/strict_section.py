"""Base model of every spec section: frozen, strict, unknown keys rejected, integers bounded.

Strict: YAML's types are taken as written. `true` is not the integer 1, `"0.05"` is not a number,
`2.0` is not an integer; floats are finite. Every integer is at most `MAX_COUNT` unless its field
sets a bound of its own, so no count (rounds, epochs, steps) can ask for a practically endless run.
"""

from annotated_types import Le, Lt
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: The largest integer a field without a bound of its own accepts.
MAX_COUNT = 100_000
#: The largest learning rate any field accepts (federation's, an entry's, distillation's).
MAX_LR = 100


class Section(BaseModel):
    """A frozen spec section that rejects unknown keys, loose types and unbounded integers."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True,
                              allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value, info: ValidationInfo):
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_COUNT:
            field = cls.model_fields[info.field_name]
            if not any(isinstance(m, Le | Lt) for m in field.metadata):
                raise ValueError(f"must be at most {MAX_COUNT:,} (got {value:,}); every count in "
                                 "a spec is bounded")
        return value
