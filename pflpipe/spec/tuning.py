"""The `tuning` section: settings chosen on seeds that are never reported.

Each tuned personalization entry names a grid (parameter → values; every combination is a grid
point). Every grid point trains on every tuning seed, is scored on the validation split, and the
point with the best mean validation score is the setting the reported seeds (`experiment.seeds`)
run. The tuning seeds must be disjoint from the reported ones: a setting chosen on a seed that is
also reported has seen that seed's data. Every tuned entry gets `tuning.budget` unless it gives a
budget of its own, so a new method and its baselines are tuned alike.
"""

import difflib
import itertools
import json
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from pflpipe.errors import DataError
from pflpipe.layout import TUNING_JSON
from pflpipe.spec.sections import checked_seeds
from pflpipe.spec.strict_section import Section

GridValue = bool | int | float | str
#: Entry fields a grid may not vary: they name the entry, or the budget sets them.
UNTUNABLE = ("name", "label")


class Budget(Section):
    """How much tuning one entry gets."""

    max_points: int = Field(
        8, ge=1, le=1000,
        description="Most grid points an entry's grid may hold (the product of its value lists).")
    rounds: int | None = Field(
        None, ge=1,
        description="Rounds each grid point trains on each tuning seed (epochs, for an entry "
        "whose clients train alone); the entry's own when omitted. The reported seeds always "
        "train the entry's own rounds.")


class TunedEntry(Section):
    """The grid of one personalization entry."""

    entry: str = Field(description="The entry's display name: its label, else its algorithm "
                       "name (an entry of the personalize stage).")
    grid: dict[str, list[GridValue]] = Field(
        min_length=1,
        description="Parameter of the entry → the values tried, e.g. {lam: [0.01, 0.1, 1]}; "
        "every combination is a grid point, taken in the order written.")
    budget: Budget | None = Field(
        None, description="This entry's budget; tuning.budget when omitted (the same for every "
        "entry unless the spec says otherwise).")

    @field_validator("grid")
    @classmethod
    def _values(cls, value: dict[str, list]) -> dict[str, list]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"{key}: give at least one value")
            if len({json.dumps(v) for v in values}) != len(values):
                raise ValueError(f"{key}: must not repeat a value (got {values})")
        return value

    def points(self) -> list[dict]:
        """Every grid point as parameter → value, in the order the grid is written."""
        keys = list(self.grid)
        return [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*(self.grid[k] for k in keys))]


class Tuning(Section):
    """Leak-proof tuning: grids per entry, chosen on the validation splits of tuning seeds."""

    seeds: list[int] = Field(
        min_length=1, max_length=100,
        description="Seeds the grid points train on; disjoint from experiment.seeds (never "
        "reported). Each in 0..4294967295.")
    entries: list[TunedEntry] = Field(min_length=1, description="The tuned entries and grids.")
    budget: Budget = Field(default_factory=Budget,
                           description="Every tuned entry's budget unless it gives its own.")

    _unique = field_validator("seeds")(classmethod(lambda cls, value: checked_seeds(value)))

    def budget_of(self, tuned: TunedEntry) -> Budget:
        """The entry's own budget, else the section's."""
        return tuned.budget or self.budget

    def find(self, label: str) -> TunedEntry | None:
        """The grid of the entry called `label`, if it is tuned."""
        return next((t for t in self.entries if t.entry == label), None)


def with_values(entry, values: dict):
    """Return `entry` (a params model) with `values` set, validated as the spec validates it."""
    return type(entry).model_validate({**entry.model_dump(), **values})


def rounds_field(entry) -> str:
    """The field that counts an entry's training: rounds, or epochs when clients train alone."""
    return "rounds" if "rounds" in type(entry).model_fields else "epochs"


def point_entry(entry, values: dict, budget: Budget):
    """The entry as one grid point trains it on a tuning seed: `values`, rounds from `budget`."""
    rounds = {rounds_field(entry): budget.rounds} if budget.rounds else {}
    return with_values(entry, {**values, **rounds})


def replace_entry(spec, label: str, entry):
    """Return `spec` with the personalization entry `label` replaced by `entry`."""
    return spec.model_copy(update={"personalization": [
        entry if e.display_name == label else e for e in spec.personalization]})


def tuning_errors(spec):
    """(loc, message, value) of every tuning setting inconsistent with the rest of the spec."""
    tuning = spec.tuning
    if tuning is None:
        return
    reported = spec.experiment.seeds
    both = sorted(set(tuning.seeds) & set(reported))
    if both:
        yield (("tuning", "seeds"), f"must be disjoint from experiment.seeds, but seed(s) "
               f"{both} are in both (tuning.seeds {tuning.seeds}, experiment.seeds {reported}); "
               "a setting chosen on a reported seed has seen its data. Choose other tuning "
               "seeds", tuning.seeds)
    fractions = getattr(spec.partition, "fractions", None)
    if fractions is not None and not fractions.has_validation:
        yield (("tuning",), "chooses on the validation split, but partition.fractions.val is 0; "
               "give val a fraction", None)
    entries = {e.display_name: e for e in spec.personalization if e.stage == "personalize"}
    seen: set[str] = set()
    for index, tuned in enumerate(tuning.entries):
        loc = ("tuning", "entries", index)
        if tuned.entry in seen:
            yield ((*loc, "entry"), f"{tuned.entry!r} is tuned twice; give each entry one grid",
                   tuned.entry)
        seen.add(tuned.entry)
        if tuned.entry not in entries:
            yield ((*loc, "entry"), f"names no entry of the personalize stage; choose among "
                   f"{', '.join(entries) or '(none)'}", tuned.entry)
            continue
        yield from _grid_errors(entries[tuned.entry], tuned, tuning.budget_of(tuned), loc)


def _grid_errors(entry, tuned: TunedEntry, budget: Budget, loc: tuple):
    fields = [f for f in type(entry).model_fields if f not in UNTUNABLE]
    points = len(tuned.points())
    if points > budget.max_points:
        yield ((*loc, "grid"), f"holds {points} grid points, more than the budget's max_points "
               f"{budget.max_points}; shrink the grid or raise the budget", points)
    for key, values in tuned.grid.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else f"; choose among {fields}"
            yield ((*loc, "grid", key), f"not a tunable parameter of {entry.name!r}{hint}", key)
            continue
        if key == rounds_field(entry) and budget.rounds:
            yield ((*loc, "grid", key), f"the budget sets {key} of every grid point "
                   f"({budget.rounds}); remove {key} from the grid or budget.rounds", key)
        for position, value in enumerate(values):
            try:
                with_values(entry, {key: value})
            except ValidationError as err:
                yield ((*loc, "grid", key, position), err.errors()[0]["msg"], value)


def point_spec(spec, label: str, values: dict):
    """Return `spec` with entry `label` as grid point `values` trains it on a tuning seed."""
    tuned = spec.tuning.find(label)
    return replace_entry(spec, label,
                         point_entry(spec.algorithm(label), values, spec.tuning.budget_of(tuned)))


def unequal_tuning(spec) -> str | None:
    """Say which personalize entries were tuned over more settings than others, if any do.

    An untuned entry counts as one setting (the spec's).
    """
    counts = {e.display_name: 1 for e in spec.personalization if e.stage == "personalize"}
    for tuned in spec.tuning.entries if spec.tuning else ():
        counts[tuned.entry] = len(tuned.points())
    if len(set(counts.values())) < 2:
        return None
    tried = ", ".join(f"{label} {n}" for label, n in counts.items())
    return (f"Unequal tuning: the entries tried different numbers of settings ({tried}); an "
            "entry tuned over more settings had more chances on the validation split.")


def read_tuning(tuning_dir: Path) -> dict:
    """The content of a tuning.json (in a `tune` output or a tuned model's results)."""
    path = Path(tuning_dir) / TUNING_JSON
    if not path.is_file():
        raise DataError(f"{tuning_dir} holds no {TUNING_JSON}; it is the output of the tune stage")
    return json.loads(path.read_text())


def apply_tuning(spec, label: str, tuning_dir: Path):
    """Return `spec` with entry `label` at the setting `tune` chose for it."""
    entries = read_tuning(tuning_dir)["entries"]
    if label not in entries:
        raise DataError(f"{label}: the tuning results hold no choice for this entry (they tune "
                        f"{', '.join(entries) or 'nothing'})")
    return replace_entry(spec, label, with_values(spec.algorithm(label), entries[label]["chosen"]))
