"""Read a YAML spec safely, keep every key's line, and turn validation errors into clear lines.

Each problem becomes ``FILE:LINE: dotted.path: what is wrong (got X); what to do``. Duplicate keys
are errors (PyYAML would silently keep the last one). A spec is bounded before it is built: its
size, how deep it nests and how many values it holds once YAML aliases are expanded (a 550-byte
"billion laughs" spec expands to 10⁹ values), and an alias may not refer to itself.
"""

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pflpipe.errors import SpecError, not_utf8
from pflpipe.spec.algorithms import PARAMS
from pflpipe.spec.spec import Spec
from pflpipe.spec.yaml_reader import AmbiguousValue, _Loader, ambiguous_problem

Loc = tuple[str | int, ...]
_CREDENTIAL_WORDS = ("secret", "password", "token", "access_key", "credential")
_TAGS = ("name", "strategy", "architecture", "kind")  # discriminator keys of the spec's unions
#: Limits on a spec file (the largest shipped spec is 2 kB, 4 levels deep, 150 values).
MAX_BYTES, MAX_DEPTH, MAX_VALUES = 100_000, 20, 50_000


def read_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> Spec:
    """Load and validate a spec file (with `overrides`); raise SpecError listing every problem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        _check_size(len(data), str(path))
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: the spec {not_utf8(err)}") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read the spec ({err.__class__.__name__}: {err})") from None
    return parse_spec(text, str(path), overrides)


def parse_spec(text: str, filename: str = "<spec>", overrides: dict[str, Any] | None = None,
               source: str = "--set") -> Spec:
    """Validate spec text; raise SpecError listing every problem with its line.

    `overrides` (dotted path → value, see `pflpipe.spec.overrides`) are applied first; errors
    about them name the override.
    """
    data, lines = parse_yaml(text, filename)
    if overrides:
        from pflpipe.spec.overrides import apply_overrides

        data = apply_overrides(data, overrides, lines, source)
    unrunnable = registration_errors(data, lines, filename)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as err:
        # an entry naming a malformed params model is not in the union: say why, not "unknown"
        others = [line for line in format_errors(err, data, lines, filename)
                  if not any(f": personalization[{i}]" in line for i in unrunnable)]
        raise SpecError([*unrunnable.values(), *others]) from None
    if unrunnable:
        raise SpecError(list(unrunnable.values()))
    return spec


def registration_errors(data: Any, lines: dict[Loc, int], filename: str) -> dict[int, str]:
    """The personalization entries whose algorithm cannot run (`pflpipe.spec.registration`).

    Returns the problem of each such entry, by its index, as ``FILE:LINE: path: problem``.
    """
    from pflpipe.spec.registration import problem, server_rule_problem

    entries = data.get("personalization") if isinstance(data, dict) else None
    optimizer = _server_optimizer(data)
    out = {}
    for index, entry in enumerate(entries if isinstance(entries, list) else ()):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and (text := problem(name) or (
                optimizer and server_rule_problem(name, optimizer))):
            loc = ("personalization", index, "name")
            line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
            out[index] = f"{filename}:{line}: {_dotted(loc)}: {text}"
    return out


def _server_optimizer(data: Any) -> str | None:
    """The spec's server optimizer unless plain FedAvg: e.g. ``fedadam``."""
    federation = data.get("federation") if isinstance(data, dict) else None
    section = federation.get("server_optimizer") if isinstance(federation, dict) else None
    if not isinstance(section, dict):
        return None
    name, lr = section.get("name", "fedavg"), section.get("lr")
    if name != "fedavg":
        return str(name)
    return None if lr in (None, 1) else f"fedavg (lr {lr})"


def parse_yaml(text: str, filename: str = "<spec>") -> tuple[dict, dict[Loc, int]]:
    """Parse YAML into plain data plus the 1-based line of every key and list item."""
    _check_size(len(text.encode("utf-8", "replace")), filename)
    loader = None
    try:
        _check_limits(text, filename)
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{filename}: the spec is empty; expected a mapping with at least "
                            "experiment, dataset and partition")
        if not isinstance(node, yaml.MappingNode):
            kind = {yaml.SequenceNode: "a list", yaml.ScalarNode: "a single value"}[type(node)]
            raise SpecError(f"{filename}:{node.start_mark.line + 1}: the spec must be a mapping of "
                            f"sections (experiment, dataset, partition, ...), got {kind}")
        lines: dict[Loc, int] = {(): node.start_mark.line + 1}
        data = _build(loader, node, (), lines, filename)
        if loader.ambiguous:
            raise SpecError(loader.ambiguous)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark else filename
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"{where}: invalid YAML: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def _check_size(size: int, filename: str) -> None:
    if size > MAX_BYTES:
        raise SpecError(f"{filename}: the spec is larger than {MAX_BYTES:,} bytes; a spec is a few "
                        "kilobytes (data goes in files under dataset.root, not in the spec)")


def _check_limits(text: str, filename: str) -> None:
    """Walk the YAML events once: reject deep nesting, self-referring and expanding aliases.

    Counts every value as if aliases were expanded, without expanding them.
    """
    stack: list[list] = []       # open collections: [values so far, anchor]
    sizes: dict[str, int] = {}   # finished anchors: values each expands to
    for event in yaml.parse(text, Loader=_Loader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise SpecError(f"{filename}:{line}: the spec nests more than {MAX_DEPTH} levels "
                                "deep; no section of a spec is nested that deeply")
            stack.append([1, event.anchor])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            count, anchor = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            count, anchor = 1, event.anchor
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for _, anchor in stack):
                raise SpecError(f"{filename}:{line}: alias *{event.anchor} refers to a value that "
                                "contains it (a recursive alias); write the value out instead")
            count, anchor = sizes.get(event.anchor, 1), None
        else:
            continue
        if anchor is not None:
            sizes[anchor] = count
        if stack:
            stack[-1][0] += count
            count = stack[-1][0]
        if count > MAX_VALUES:
            raise SpecError(f"{filename}:{line}: the spec holds more than {MAX_VALUES:,} values "
                            "once its YAML aliases (*name) are expanded; use fewer aliases")


def _build(loader: _Loader, node, loc: Loc, lines: dict[Loc, int], filename: str) -> Any:
    plain = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}
    if type(node) in plain and node.tag != plain[type(node)]:
        raise SpecError(f"{filename}:{node.start_mark.line + 1}: {_dotted(loc) or 'spec'}: YAML "
                        f"tag {node.tag} is not allowed in a spec; remove it")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str | int | float | bool) or key is None:
                raise SpecError(f"{filename}:{line}: {_dotted(loc) or 'spec'}: keys must be plain "
                                f"names (got {key!r})")
            if key in out:
                raise SpecError(f"{filename}:{line}: {_dotted((*loc, key))}: duplicate key (first "
                                f"given on line {lines[(*loc, key)]}); keep only one")
            lines[(*loc, key)] = line
            out[key] = _build(loader, value_node, (*loc, key), lines, filename)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            items.append(_build(loader, item, (*loc, index), lines, filename))
        return items
    try:
        return loader.construct_object(node, deep=True)
    except AmbiguousValue as err:  # reported with the others once the whole file is read
        loader.ambiguous.append(f"{filename}:{node.start_mark.line + 1}: {_dotted(loc) or 'spec'}: "
                                f"{ambiguous_problem(err, loc[-1] if loc else None)}")
        return node.value


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_ABSENT = object()   # what `_data_loc` finds at a key the data does not hold
#: pydantic's names of the branches of a union of scalars, in an error's location.
_SCALARS = ("bool", "int", "float", "str", "none")


def _data_loc(loc: Loc, data: Any) -> Loc:
    """Drop the union-tag elements pydantic inserts into a location (`partition.ds2.alpha`)."""
    out: list = []
    current = data
    for part in loc:
        if isinstance(current, dict) and part not in current and any(
            current.get(tag) == part for tag in _TAGS
        ):
            continue
        if not isinstance(part, str | int) or (isinstance(part, str) and part.startswith(
                ("function-", "list[", "dict[", "union["))):
            continue
        if isinstance(part, str) and current is not _ABSENT and (
                not isinstance(current, dict) or part not in current and (
                    part in _SCALARS or part.startswith("literal["))):
            continue   # a branch of a union of scalars (`lam[0].float`), not a key of the value
        out.append(part)
        try:
            current = current[part]
        except (KeyError, IndexError, TypeError):
            current = _ABSENT
    return tuple(out)


def _model_at(loc: Loc, data: Any) -> type[BaseModel] | None:
    """Return the spec model that validates the mapping found at `loc` in `data`."""
    annotation: Any = Spec
    current = data
    for part in loc:
        annotation = _pick(annotation, current)
        if isinstance(part, int):
            args = typing.get_args(annotation)
            annotation = args[0] if args else None
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) or next(
                (f for f in annotation.model_fields.values() if f.alias == part), None)
            if field is None:
                return None
            annotation = field.annotation
        else:
            return None
        current = current[part] if isinstance(current, dict | list) else None
    annotation = _pick(annotation, current)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _pick(annotation: Any, value: Any) -> Any:
    """Resolve Optional/Annotated/union annotations using the union tag found in `value`."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            models = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
            if len(options) == 1:
                annotation = options[0]
                continue
            for model in models:
                if isinstance(value, dict) and any(
                    value.get(tag) in typing.get_args(model.model_fields[tag].annotation)
                    for tag in _TAGS if tag in model.model_fields
                ):
                    return model
            return models[0] if len(models) == 1 else None
        return annotation


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _got(value: Any) -> str:
    if isinstance(value, dict | list) or value is None:
        return ""
    text = repr(value)
    return f" (got {text if len(text) < 60 else text[:57] + '...'})"


def _message(error: dict, loc: Loc, data: Any) -> tuple[Loc, str]:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1], data)
        allowed = _keys_of(model) if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.5)
        parent = _value_at(loc[:-1], data)
        owner = next((parent[t] for t in ("name",) if isinstance(parent, dict) and t in parent),
                     None)
        if any(word in str(loc[-1]).lower() for word in _CREDENTIAL_WORDS):
            return loc, ("credentials are never read from the spec; set AWS_ACCESS_KEY_ID / "
                         "AWS_SECRET_ACCESS_KEY in the environment, or name a Kubernetes secret "
                         "in storage.secret_name")
        what = f"not a parameter of {owner!r}" if owner and loc[:1] == ("personalization",) \
            else "unknown key"
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return loc, f"{what}{hint} (allowed: {', '.join(allowed)})" if allowed else what + hint
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        close = difflib.get_close_matches(str(ctx.get("tag")), tags, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return (*loc, ctx["discriminator"].strip("'")), (
            f"unknown value {ctx.get('tag')!r}{hint} (allowed: {', '.join(tags)})")
    if kind == "union_tag_not_found":
        disc = str(ctx.get("discriminator", "")).strip("'")
        return (*loc, disc), f"required field missing; say which one{_options(loc)}"
    if kind == "missing":
        return loc, "required field missing"
    if kind in ("model_type", "model_attributes_type", "dict_type") and error.get("input") is None:
        return loc, ("is empty (the key has no value); remove the key to use the defaults, or "
                     "give its settings")
    if kind in ("model_type", "model_attributes_type", "dict_type") and isinstance(
            error.get("input"), str) and loc[:1] == ("personalization",):
        name = error["input"]
        return loc, (f"an entry is a mapping, not a name (got {name!r}); write {{name: {name}}} "
                     "(with its parameters, e.g. {name: ditto, lam: 0.1})")
    if kind in ("too_short", "too_long"):
        bound, length = ctx.get("min_length" if kind == "too_short" else "max_length"), \
            ctx.get("actual_length")
        got = "an empty list" if length == 0 else f"{length:,} entries"
        return loc, f"must hold at {'least' if kind == 'too_short' else 'most'} {bound:,} " \
            f"{'entry' if bound == 1 else 'entries'} (got {got})"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = message.replace("Input should be", "must be").replace("Input should", "must")
    if kind != "spec" and "(got" not in message:
        message += _got(error.get("input"))
    return loc, message + _type_hint(kind, error.get("input"))


#: What each branch of a union of scalars accepts, in words (`_one_per_union`).
_BRANCH_WORDS = {"bool_type": "true or false", "int_type": "an integer", "float_type": "a number",
                 "string_type": "text", "none_required": "null"}


def _one_per_union(errors: list[dict], data: Any) -> list[dict]:
    """Replace the errors of every branch of a union of scalars by one error for the value.

    A value that fails `bool | int | float | str` gets an error per branch (``lam[0].bool``,
    ``.int``, ...). When one branch took its type but refused its value (a NaN float: "must be
    a finite number"), that branch's error is the one; otherwise one error lists what the
    branches accept ("must be 'auto', true or false").
    """
    groups: dict[Loc, list[dict]] = {}
    for error in errors:
        groups.setdefault(_data_loc(error["loc"], data), []).append(error)
    out = []
    for loc, group in groups.items():
        branches = [e for e in group if e["loc"] and isinstance(e["loc"][-1], str)
                    and (not loc or e["loc"][-1] != loc[-1])]
        if len(branches) < 2:
            out += group
            continue
        out += [e for e in group if e not in branches]
        typed = [e for e in branches if e["type"] not in _BRANCH_WORDS
                 and e["type"] not in ("literal_error", "int_from_float")]
        if typed:
            out.append(typed[0])
            continue
        accepted = [e["ctx"]["expected"] if e["type"] == "literal_error" else
                    _BRANCH_WORDS.get(e["type"], "a whole number") for e in branches]
        words = ", ".join(dict.fromkeys(w for text in accepted for w in text.split(" or ")))
        words = " or ".join(words.rsplit(", ", 1))
        out.append({**branches[0], "type": "union", "msg": f"must be {words}"})
    return out


def _type_hint(kind: str, value: Any) -> str:
    """Say how to write a number the strict spec refused."""
    if kind not in ("int_type", "float_type"):
        return ""
    if isinstance(value, bool):
        return "; true/false is not a number"
    if isinstance(value, float) and kind == "int_type":
        return "; write a whole number without a decimal point or exponent"
    try:
        float(value)
    except (TypeError, ValueError):
        return ""
    return "; write the number without quotes"


def _options(loc: Loc) -> str:
    known = {"dataset": "mnist, fashion_mnist, emnist, cifar10, cifar100, digits, arrays, "
                        "synthetic, gaussian",
             "partition": "iid, ds1, ds2, ds3, ds4, shards, label_skew, concept_drift, natural",
             "model": "mlp, cnn_cifar, logistic, fedavg_cnn, cnn6, custom",
             "personalization": ", ".join(PARAMS),
             "storage": "local, s3"}
    return f" ({known[loc[0]]})" if loc and loc[0] in known else ""


def _value_at(loc: Loc, data: Any) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def format_errors(err: ValidationError, data: Any, lines: dict[Loc, int],
                  filename: str) -> list[str]:
    """Format every validation error as `FILE:LINE: path: message`, in file order."""
    out: list[tuple[int, str]] = []
    for error in _one_per_union(err.errors(), data):
        if error["type"] == "default_factory_not_called":  # a default that reads a bad section
            continue
        loc, message = _message(error, _data_loc(error["loc"], data), data)
        line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
        where = f"{filename}:{line}" if isinstance(line, int) else f"{filename} ({line})"
        out.append((line if isinstance(line, int) else 10**9,
                    f"{where}: {_dotted(loc) or 'spec'}: {message}"))
    return [text for _, text in sorted(out, key=lambda item: item[0])]
