"""A sweep: one spec, several settings, every combination a point (docs/sweeps.md).

```yaml
sweep:
  partition.alpha: [0.1, 0.5, 1.0]     # a dotted path, spelled as for --set
  federation.rounds: [20, 40]          # several keys: their Cartesian product (6 points)
```
A value may be a whole section (``partition: [{strategy: ds1}, {strategy: ds2, alpha: 0.9}]``),
applied as ``--set partition=...`` would be (`pflpipe.spec.overrides`). Each point is the spec
with its overrides applied and without the sweep, validated as a whole; it runs exactly as that
spec on its own would (the same task inputs, so the same cache keys and results).
"""

import itertools
import re
from dataclasses import dataclass
from typing import Any

#: The most points a sweep may have (each is a whole experiment over every seed).
MAX_POINTS = 64
#: Settings a sweep must not change: what names the sweep and its runs, the repetitions each
#: point is averaged over, where results and tracking go, and the sweep itself.
FIXED = ("experiment.name", "experiment.seeds", "experiment.output_dir", "tracking", "sweep")


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its short label, its overrides and the spec it runs."""

    label: str
    overrides: dict[str, Any]
    spec: Any   # pflpipe.spec.Spec, with `sweep` None


def fixed_setting(path: str) -> str | None:
    """The setting of `FIXED` that `path` would change, else None."""
    dotted = ".".join(p for p in re.split(r"\.|\[(\d+)\]", path) if p)
    for fixed in FIXED:
        if dotted == fixed or dotted.startswith(fixed + ".") or fixed.startswith(dotted + "."):
            return fixed
    return None


def combinations(sweep: dict[str, list]) -> list[dict[str, Any]]:
    """Every point's overrides, in the order of the keys (the last key varies fastest).

    >>> combinations({"alpha": [0.1, 1.0], "rounds": [2]})
    [{'alpha': 0.1, 'rounds': 2}, {'alpha': 1.0, 'rounds': 2}]
    """
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.values())]


def too_many(sweep: dict[str, list]) -> str | None:
    """Why the sweep has too many points (naming the key that raises it most), else None."""
    count = 1
    for values in sweep.values():
        count *= len(values)
    if count <= MAX_POINTS:
        return None
    largest = max(sweep, key=lambda key: len(sweep[key]))
    factors = " × ".join(f"{len(v)} ({k})" for k, v in sweep.items())
    return (f"{factors} = {count} points; at most {MAX_POINTS} (sweep.MAX_POINTS). "
            f"{largest!r} raises it most ({len(sweep[largest])} values): sweep fewer values, or "
            "split the sweep into several specs")


def point_label(overrides: dict[str, Any]) -> str:
    """A point's short label: ``alpha=0.1,rounds=20``; a section ``partition=ds2(alpha=0.9)``.

    Each key is named by its last part, or by its whole path when two keys share the last part.

    >>> point_label({"partition.alpha": 0.1, "federation.rounds": 20})
    'alpha=0.1,rounds=20'
    >>> point_label({"partition": {"strategy": "ds2", "alpha": 0.9}})
    'partition=ds2(alpha=0.9)'
    """
    last = [re.split(r"\.|\[", key)[-1].rstrip("]") for key in overrides]
    names = [short if last.count(short) == 1 else key for short, key in zip(last, overrides,
                                                                             strict=True)]
    return ",".join(f"{name}={_value(value)}" for name, value in zip(names, overrides.values(),
                                                                      strict=True))


def _value(value: Any) -> str:
    if isinstance(value, dict):
        tag = next((value[t] for t in ("strategy", "name", "architecture", "kind") if t in value),
                   None)
        rest = ",".join(f"{k}={_value(v)}" for k, v in value.items() if v is not tag)
        return f"{tag or ''}({rest})" if rest else str(tag or "()")
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return str(value).replace("/", "_")


def point_spec(spec, overrides: dict[str, Any]):
    """The spec of one point: `spec` without its sweep, with `overrides` applied, validated.

    Raises pydantic's ValidationError for a point the spec does not accept.
    """
    return type(spec).model_validate(_point_data(spec, overrides))


def _point_data(spec, overrides: dict[str, Any]) -> dict:
    """The data of one point's spec: `spec`'s, without the sweep, `overrides` applied."""
    from pflpipe.spec.overrides import apply_overrides

    data = spec.model_dump(mode="json", by_alias=True)
    data.pop("sweep", None)
    return apply_overrides(data, overrides, {}, "sweep")


def points(spec) -> list[Point]:
    """Every point of `spec`'s sweep (one point, the spec itself, when it has none)."""
    if not spec.sweep:
        return [Point("", {}, spec)]
    return [Point(point_label(o), o, point_spec(spec, o)) for o in combinations(spec.sweep)]


def sweep_errors(spec):
    """The sweep's problems as (location, message, value): each point validated as a whole.

    A point the spec does not accept is named with its problem, e.g. ``sweep.partition.alpha:
    point alpha=-1: partition.alpha: must be greater than 0``; the first failing point is
    reported (the others usually fail alike).
    """
    from pydantic import ValidationError

    from pflpipe.errors import SpecError
    from pflpipe.spec.loader import _data_loc, _dotted, _message

    sweep = spec.sweep
    if not sweep:
        return
    if shape := list(_shape_errors(sweep)):
        yield from shape
        return
    for key in sweep:
        if (fixed := fixed_setting(key)) is not None:
            yield (("sweep", key), f"a sweep may not change {fixed} (every point shares "
                   f"{', '.join(FIXED)}); remove this key", None)
            return
    if (problem := too_many(sweep)) is not None:
        yield (("sweep",), problem, None)
        return
    for overrides in combinations(sweep):
        label = point_label(overrides)
        try:
            data = _point_data(spec, overrides)
            type(spec).model_validate(data)
        except SpecError as err:   # a path that leads nowhere
            text = str(err).removeprefix("--set: ").removeprefix("--set ")
            yield (("sweep", _key_of(text, overrides)), f"point {label}: {text}", None)
            return
        except ValidationError as err:
            for error in err.errors():
                loc, message = _message(error, _data_loc(error["loc"], data), data)
                where = _dotted(loc)
                key = next((k for k in overrides if _covers(k, where)), next(iter(overrides)))
                yield (("sweep", key), f"point {label}: {where or 'spec'}: {message}", None)
            return


def _key_of(message: str, overrides: dict[str, Any]) -> str:
    return next((key for key in overrides if message.startswith(key)), next(iter(overrides)))


def _covers(key: str, where: str) -> bool:
    dotted = ".".join(p for p in re.split(r"\.|\[(\d+)\]", key) if p)
    plain = re.sub(r"\[(\d+)\]", r".\1", where)
    return plain == dotted or plain.startswith(dotted + ".") or dotted.startswith(plain + ".")


def checked_sweep(value: Any) -> Any:
    """The `sweep` section's shape: a mapping of dotted paths (to lists: `sweep_errors`)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise ValueError("must map setting paths to lists of values, e.g. "
                         "{partition.alpha: [0.1, 1.0]} (got "
                         f"{'an empty mapping' if value == {} else type(value).__name__})")
    return value


def _shape_errors(sweep: dict):
    for key, values in sweep.items():
        if not isinstance(values, list):
            yield (("sweep", key), f"expected a list of values, e.g. [{values!r}] (got "
                   f"{type(values).__name__} {values!r})", None)
        elif not values:
            yield (("sweep", key), "the list of values is empty; give at least one value", None)
