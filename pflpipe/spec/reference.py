"""Render the spec reference (every section, key, type, default and description) as Markdown.

It is rendered from the pydantic models themselves, so the README cannot drift from the code.
"""

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pflpipe import markdown
from pflpipe.spec.spec import Spec

_TAGS = ("name", "strategy", "architecture", "kind")


PREAMBLE = (
    "Types are strict: `true` is not 1, `\"0.05\"` is not a number (`1e-3` is), `2.0` is not an "
    "integer, and numbers are finite. A number that YAML 1.1 and YAML 1.2 read differently "
    "(`1:30`, `017`, `0b101`, `1_000`, `0o17`) is an error: write it in plain digits. So are "
    "the words YAML 1.1 alone reads as booleans (`on`, `yes`, `off`, `no`) and its dates "
    "(`1999-12-31`): write `true`/`false`, or quote them as text. No integer "
    "exceeds {max_count:,} except the seeds, which lie "
    "in 0..4294967295. A spec file holds at most {max_bytes:,} bytes, nests "
    "at most {max_depth} levels deep and holds at most {max_values:,} values once its YAML aliases "
    "are expanded.\n"
)


def markdown_reference() -> str:
    """Markdown tables describing every section of the spec."""
    from pflpipe.spec.loader import MAX_BYTES, MAX_DEPTH, MAX_VALUES
    from pflpipe.spec.strict_section import MAX_COUNT

    out: list[str] = [PREAMBLE.format(max_count=MAX_COUNT, max_bytes=MAX_BYTES,
                                      max_depth=MAX_DEPTH, max_values=MAX_VALUES)]
    for name, field in Spec.model_fields.items():
        required = " (required)" if field.is_required() else ""
        variants = _variants(field.annotation)
        out.append(f"#### `{name}`{required}\n")
        if field.description:
            out.append(field.description + "\n")
        if variants:
            for model in variants:
                tag = next(t for t in _TAGS if t in model.model_fields)
                values = " \\| ".join(f"`{v}`" for v in typing.get_args(
                    model.model_fields[tag].annotation))
                out.append(f"**`{name}.{tag}`: {values}** — {_summary(model)}\n")
                out += _tables(model, name, skip=tag)
        elif _nested(field.annotation) is not None:
            out += _tables(_unwrap(field.annotation), name)
        # else a mapping of the user's own keys (sweep): its description says it all
    return "\n".join(out)


def _tables(model: type[BaseModel], path: str, skip: str | None = None) -> list[str]:
    """The model's table, then one table per nested section (e.g. `partition.fractions`)."""
    out, seen = [_table(model, skip)], set()
    for name, field in model.model_fields.items():
        nested = _nested(field.annotation)
        if nested is not None and nested not in seen:
            seen.add(nested)
            out.append(f"`{path}.{field.alias or name}`: {_summary(nested)}\n")
            out += _tables(nested, f"{path}.{field.alias or name}")
    return out


def _nested(annotation: Any) -> type[BaseModel] | None:
    annotation = _strip(annotation)
    if typing.get_origin(annotation) is list:
        annotation = _strip(typing.get_args(annotation)[0])
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _variants(annotation: Any) -> list[type[BaseModel]]:
    inner = _strip(annotation)
    if typing.get_origin(inner) is list:
        inner = _strip(typing.get_args(inner)[0])
    if typing.get_origin(inner) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(inner)
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        return models if len(models) > 1 else []  # one model or null: an optional section
    return []


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _unwrap(annotation: Any) -> type[BaseModel]:
    annotation = _strip(annotation)
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    raise TypeError(annotation)


def _summary(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def _table(model: type[BaseModel], skip: str | None = None) -> str:
    rows = [[f"`{field.alias or name}`", _type(field.annotation), _default(field),
             (field.description or "").replace("|", "\\|")]
            for name, field in model.model_fields.items() if name != skip]
    return "\n".join(markdown.table(["key", "type", "default", "description"], rows)) + "\n"


def _type(annotation: Any) -> str:
    annotation = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in typing.get_args(annotation))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type(a) for a in typing.get_args(annotation))}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is PydanticUndefined:
        return ""
    if isinstance(value, BaseModel) or (isinstance(value, dict) and value and
                                        any(t in value for t in _TAGS)):
        return "see below" if isinstance(value, BaseModel) else f"`{value}`"
    return f"`{value}`" if value not in (None, "") else ("`null`" if value is None else '`""`')
