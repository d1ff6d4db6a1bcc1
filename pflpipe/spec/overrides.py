"""Overrides of a spec's settings, validated like the file: ``--set federation.rounds=50``.

A dotted path walks the spec's mappings; a list is indexed by position (``personalization.1.lam``
or ``personalization[1].lam``) or by an entry's label or name (``personalization.ditto.lam``).
Values are YAML (``50`` is a number, ``[0, 1, 2]`` a list, ``true`` a boolean). A mapping value
is merged into what is there, unless it names another variant (``partition={strategy: ds1,
...}``), which replaces the section; anything else replaces what is there. Errors about an
overridden setting name the override instead of a line of the file.
"""

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from pflpipe.errors import SpecError

Loc = tuple[str | int, ...]
#: The keys that pick a variant of a section (a partition strategy, an algorithm, ...).
TAGS = ("strategy", "name", "architecture", "kind")


def parse_assignments(assignments: Sequence[str]) -> dict[str, Any]:
    """Turn ``PATH=VALUE`` strings into a mapping of dotted paths to YAML values.

    >>> parse_assignments(["federation.rounds=50", "experiment.seeds=[0, 1]", "federation.lr=1e-3"])
    {'federation.rounds': 50, 'experiment.seeds': [0, 1], 'federation.lr': 0.001}
    """
    # the file's own YAML reading (1e-3 is a number)
    from pflpipe.spec.yaml_reader import AmbiguousValue, _Loader, ambiguous_problem

    out: dict[str, Any] = {}
    for given in assignments:
        text = given.replace("\n", "\\n")   # one line on screen, as the shell took it
        path, sep, value = given.partition("=")
        if not sep or not path.strip():
            raise SpecError(f"--set {text}: expected PATH=VALUE, e.g. federation.rounds=50")
        try:
            # read as the value of a key, exactly as `PATH: VALUE` in the file reads it
            read = yaml.load(f"v: {value}", Loader=_Loader) if value.strip() else {"v": ""}  # noqa: S506
        except AmbiguousValue as err:
            raise SpecError(f"--set {text}: {ambiguous_problem(err, path.strip().split('.')[-1])}"
                            ) from None
        except yaml.YAMLError as err:
            raise SpecError(f"--set {text}: {_yaml_problem(err, value)}") from None
        if not isinstance(read, dict) or list(read) != ["v"]:
            raise SpecError(f"--set {text}: the value runs over a line break into another setting "
                            f"({', '.join(str(k) for k in read if k != 'v')}); give one value per "
                            "--set, on one line, or quote it if you mean text")
        out[path.strip()] = read["v"]
    return out


def _yaml_problem(err: yaml.YAMLError, value: str) -> str:
    """What is wrong with a --set value PyYAML cannot read, in the --set's own terms."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if "undefined alias" in problem:
        return (f"{value.strip()[:1]} starts a YAML alias, which a --set value cannot refer to; "
                "quote the value if you mean text (PATH='\"*x\"')")
    if "constructor for the tag" in problem or problem.startswith("found unknown tag"):
        return "YAML tags (!!...) are not allowed in a --set value; remove the tag"
    mark = getattr(err, "problem_mark", None)
    at = f" at character {max(mark.column - 3, 0) + 1} of the value" if mark and mark.line == 0 \
        else ""
    return (f"the value is not valid YAML: {problem}{at}; check its brackets and quotes, or quote "
            "the whole value if you mean text")


def apply_overrides(data: dict, overrides: Mapping[str, Any], lines: dict[Loc, Any],
                    source: str = "--set") -> dict:
    """Return `data` with `overrides` applied; mark their locations in `lines` as overrides.

    `overrides` maps dotted paths (or section names) to values; a mapping value is merged. An
    error at an overridden location then reads ``(--set PATH=VALUE)`` (`source`) instead of a
    line number.
    """
    data = copy.deepcopy(data)
    for path, value in overrides.items():
        loc = _walk_path(data, path)
        merged = _assign(data, loc, value)
        # a replaced section is the override's as a whole (a field it lacks is its mistake)
        for leaf in _leaves(value, loc) if merged else [loc]:
            for key in [k for k in lines if k[:len(leaf)] == leaf]:
                del lines[key]
            lines[leaf] = f"{source} {path}={_show(value)}"
    return data


def _walk_path(data: dict, path: str) -> Loc:
    """The location of a dotted path in `data` (list entries resolved to their index)."""
    parts = [p for p in re.split(r"\.|\[(\d+)\]", path) if p]
    if parts[0] == "sweep" and len(parts) > 1:   # a sweep's keys are dotted paths themselves
        return ("sweep", path.split(".", 1)[1])
    loc: list[str | int] = []
    node: Any = data
    for i, part in enumerate(parts):
        if isinstance(node, list):
            index = _index(node, part, ".".join(parts[:i]) or path)
            loc.append(index)
            node = node[index]
        elif isinstance(node, dict) or node is None:
            loc.append(part)
            node = (node or {}).get(part)
        else:
            raise SpecError(f"--set {path}: {'.'.join(parts[:i])} is a single value "
                            f"({node!r}), it has no '{part}'")
    return tuple(loc)


def _index(items: list, part: str, where: str) -> int:
    if part.isdigit():
        if int(part) >= len(items):
            raise SpecError(f"--set: {where} has {len(items)} entries; index {part} does not "
                            "exist")
        return int(part)
    for index, item in enumerate(items):
        if isinstance(item, dict) and part in (item.get("label"), item.get("name")):
            return index
    raise SpecError(f"--set: {where} has no entry labelled or named {part!r}")


def _assign(data: dict, loc: Loc, value: Any) -> bool:
    """Set `value` at `loc`; return whether it was merged into a mapping there."""
    node: Any = data
    for key in loc[:-1]:
        if isinstance(node, dict) and node.get(key) is None:
            node[key] = {}
        node = node[key]
    last = loc[-1]
    current = node[last] if isinstance(node, list) else node.get(last)
    if isinstance(value, Mapping) and isinstance(current, dict) and not _retags(current, value):
        _merge(current, value)
        return True
    node[last] = copy.deepcopy(value)
    return False


def _retags(current: dict, value: Mapping) -> bool:
    """Whether `value` names another variant (strategy, name, ...): it replaces, not merges."""
    return any(tag in value and value[tag] != current.get(tag) for tag in TAGS)


def _merge(target: dict, value: Mapping) -> None:
    for key, item in value.items():
        if isinstance(item, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], item)
        else:
            target[key] = copy.deepcopy(item)


def _leaves(value: Any, loc: Loc) -> list[Loc]:
    """The locations a value sets: each key of a (merged) mapping, else `loc` itself."""
    if not isinstance(value, Mapping) or not value:
        return [loc]
    return [leaf for key, item in value.items() for leaf in _leaves(item, (*loc, key))]


def _show(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix(" ...")
