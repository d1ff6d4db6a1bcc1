"""The declarative experiment spec: pydantic models, YAML loading with line-accurate errors."""

from pflpipe.errors import SpecError
from pflpipe.spec.loader import load_spec, parse_spec
from pflpipe.spec.spec import Spec

__all__ = ["Spec", "SpecError", "load_spec", "parse_spec"]
