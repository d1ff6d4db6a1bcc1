"""The declarative experiment spec: pydantic models, YAML loading with line-accurate errors."""

from pflpipe.errors import SpecError
from pflpipe.spec.loader import parse_spec, read_spec
from pflpipe.spec.spec import Spec

__all__ = ["Spec", "SpecError", "read_spec", "parse_spec"]
