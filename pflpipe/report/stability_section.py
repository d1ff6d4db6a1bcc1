"""What best-on-validation selection can hide: a last round far below the selected one, swings.

The report scores each client's model at the round chosen on validation. A model whose training
collapsed or oscillates still shows its best round there; this module says so per model, from
what the results and history already hold. The one definition of both flags (`RULE`):

- **far below**: the last-round model's mean score (over clients, then seeds) on the reported
  split is below the selected model's by more than `FAR`: 3 points of accuracy (0.03 as a
  fraction, 3 in percent), or for a regression an MSE more than 10 % above the selected one.
- **swings**: in the second half of the model's run (its evaluated rounds after half its last
  round, those that scored every client), the mean score over clients and seeds falls from one
  round to a later one by more than `SWING`: 4 points of accuracy, or 15 % of the selected MSE
  (the largest such fall is reported).

The swing's margin is wider: it is the largest of many pairs of rounds, and a test split of a
few hundred samples moves the mean by 2-3 points from round to round (the quickstart's local
baseline falls 2.8 points late in its run, while pFedMe at its defaults swings by 5).
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pflpipe.metrics.results_table import ResultsTable, measure

#: The flags' margins in accuracy as a fraction (× 100 in percent) ...
FAR, SWING = 0.03, 0.04
#: ... and for −MSE as fractions of the selected model's MSE.
MSE_FAR, MSE_SWING = 0.10, 0.15
RULE = ("Far below: the last round's mean score is more than 3 points of accuracy (for −MSE, "
        "10 % of the selected MSE) below the selected model's. Swings: in the second half of "
        "the run (rounds that scored every client), the mean score falls by more than 4 points "
        "(15 % of the MSE) from one round to a later one. Both from the results and history "
        "tables; the selection itself is unchanged.")


@dataclass(frozen=True)
class Stability:
    """One model's selected and last-round scores and its largest late fall.

    Attributes:
        selected: Mean score of the selected models (None without such rows).
        last: Mean score of the last-round models (None without such rows).
        fall: The largest fall of the mean score in the second half of the run (None without a
            history), from round `fall_from` to round `fall_to`.
        margin: The far-below margin in this model's score.
        swing_margin: The swing margin in this model's score.

    """

    model: str
    selected: float | None
    last: float | None
    fall: float | None
    fall_from: int | None
    fall_to: int | None
    margin: float
    swing_margin: float

    @property
    def far_below(self) -> bool:
        """Whether the last round scores more than the margin below the selected round."""
        return (self.selected is not None and self.last is not None
                and _beyond(self.selected - self.last, self.margin))

    @property
    def swings(self) -> bool:
        """Whether the mean score falls by more than the margin late in the run."""
        return self.fall is not None and _beyond(self.fall, self.swing_margin)

    def to_json(self) -> dict:
        """Return report.json's entry."""
        return {"selected": self.selected, "last_round": self.last, "late_fall": self.fall,
                "late_fall_rounds": [self.fall_from, self.fall_to] if self.fall else None,
                "margins": {"far_below": self.margin, "swings": self.swing_margin},
                "far_below": self.far_below, "swings": self.swings}


def _beyond(value: float, margin: float) -> bool:
    """`value` > `margin`, where a value equal to the margin in floating point is not beyond."""
    return value > margin and not math.isclose(value, margin, rel_tol=1e-9)


def assess(table: ResultsTable, history: Iterable[dict], split: str, selection: str
           ) -> dict[str, Stability]:
    """Every model's `Stability` on `split`: its selected and last-round scores, its late fall."""
    selected = _means(table, split, selection)
    last = _means(table, split, "last_round", exact=True)
    curves = late_falls(history, split, table.unit)
    out = {}
    for model in dict.fromkeys([*selected, *last, *curves]):
        chosen = selected.get(model)
        scale = 100.0 if table.unit == "percent" else 1.0
        margins = (FAR * scale, SWING * scale)
        if table.unit == "neg_mse":
            margins = ((MSE_FAR * abs(chosen), MSE_SWING * abs(chosen)) if chosen is not None
                       else (math.inf, math.inf))
        fall, start, end = curves.get(model, (None, None, None))
        out[model] = Stability(model, chosen, last.get(model), fall, start, end, *margins)
    return out


def _means(table: ResultsTable, split: str, selection: str, *, exact: bool = False
           ) -> dict[str, float]:
    """Model → mean over seeds of the mean score over clients of `selection`'s rows on `split`.

    A row without a selection counts for any, unless `exact`.
    """
    per_seed: dict[str, dict[int, list[float]]] = {}
    for row in table.rows:
        if row.split == split and not row.scope and (
                row.selection == selection or (row.selection == "" and not exact)):
            per_seed.setdefault(row.model, {}).setdefault(row.seed, []).append(row.accuracy)
    return {m: sum(sum(v) / len(v) for v in seeds.values()) / len(seeds)
            for m, seeds in per_seed.items()}


def late_falls(history: Iterable[dict], split: str, unit: str = "fraction"
               ) -> dict[str, tuple[float, int, int]]:
    """Model → (largest fall, from round, to round) of its mean score in its run's second half.

    Rounds that scored fewer clients than the model's full evaluations are left out (a sampled
    evaluation's mean is over other clients each round).

    >>> rows = [{"model": "a", "seed": 0, "round": r, "split": "test", "client": 0,
    ...          "accuracy": a} for r, a in enumerate([0.5, 0.9, 0.8, 0.86, 0.81, 0.85])]
    >>> fall, start, end = late_falls(rows, "test")["a"]
    >>> round(fall, 6), start, end
    (0.05, 3, 4)
    """
    column, sign = ("loss", -1.0) if unit == "neg_mse" else ("accuracy", 1.0)
    scores: dict[str, dict[str, dict[int, list[float]]]] = {}
    for row in history:
        value = row.get(column)
        if row["split"] != split or row.get("scope") or value in (None, ""):
            continue
        if not math.isnan(float(value)):
            scores.setdefault(row["model"], {}).setdefault(str(row.get("seed", "")), {}) \
                .setdefault(int(row["round"]), []).append(sign * float(value))
    out = {}
    for model, seeds in scores.items():
        curve = _mean_curve(seeds.values())
        late = [r for r in curve if r > max(curve) / 2]
        fall, start, end = 0.0, None, None
        for i, r in enumerate(late):
            for q in late[i + 1:]:
                if curve[r] - curve[q] > fall:
                    fall, start, end = curve[r] - curve[q], r, q
        out[model] = (fall, start, end)
    return out


def _mean_curve(seeds: Iterable[Mapping[int, Sequence[float]]]) -> dict[int, float]:
    """Round → the mean over seeds of the mean over clients, at rounds that scored every client."""
    by_round: dict[int, list[float]] = {}
    for rounds in seeds:
        full = max(len(v) for v in rounds.values())
        for r, values in rounds.items():
            if len(values) == full:
                by_round.setdefault(r, []).append(sum(values) / len(values))
    return {r: sum(v) / len(v) for r, v in sorted(by_round.items())}


def _scale(unit: str) -> float:
    """Scores are shown in points: a fraction × 100."""
    return 100.0 if unit == "fraction" else 1.0


def _show(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value * _scale(unit):.4g}"


def said(found: Stability, split: str, unit: str) -> str | None:
    """One sentence on a flagged model; None when it is not flagged.

    >>> said(Stability("pfedme", 0.936, 0.874, 0.05, 38, 39, FAR, SWING), "test", "fraction")
    "pfedme: its last round scores 87.4, 6.2 points below the 93.6 of the models selected on \
validation; its mean test accuracy falls by 5 points from round 38 to round 39, late in its run. \
Its reported score is its best rounds', not where its training ended."
    """
    points = "points" if unit != "neg_mse" else "(−MSE)"
    scale, parts = _scale(unit), []
    if found.far_below:
        parts.append(f"its last round scores {_show(found.last, unit)}, "
                     f"{(found.selected - found.last) * scale:.3g} {points} below the "
                     f"{_show(found.selected, unit)} of the models selected on validation")
    if found.swings:
        parts.append(f"its mean {split} {measure(unit)} falls by {found.fall * scale:.3g} "
                     f"{points} from round {found.fall_from} to round {found.fall_to}, late in "
                     "its run")
    if not parts:
        return None
    return (f"{found.model}: {'; '.join(parts)}. Its reported score is its best rounds', not "
            "where its training ended.")


def blocks(found: Mapping[str, Stability], split: str, selection: str, unit: str) -> list[tuple]:
    """The report's section: a row per model, then a sentence per flagged model."""
    if not found:
        return []
    scale = _scale(unit)
    rows = [[s.model, _show(s.selected, unit), _show(s.last, unit),
             "—" if s.selected is None or s.last is None
             else f"{(s.last - s.selected) * scale:+.3g}",
             "—" if s.fall is None else (f"{s.fall * scale:.3g} (round {s.fall_from} → "
                                         f"{s.fall_to})" if s.fall_from is not None else "0"),
             ", ".join(flag for flag, on in (("far below", s.far_below), ("swings", s.swings))
                       if on) or "—"]
            for s in found.values()]
    lines = [line for s in found.values() if (line := said(s, split, unit))]
    in_points = " (in points: % of accuracy)" if unit == "fraction" else ""
    return [("h2", "Stability of the selected models"),
            ("p", f"Each model's mean {split} {measure(unit)}{in_points} with the {selection} "
                  f"models the report evaluates and with its last-round models, and the largest "
                  f"fall of its mean over rounds late in its run. {RULE}"),
            ("table", ["model", selection, "last round", "last − selected",
                       "largest late fall", "flag"], rows),
            *([("list", lines)] if lines else [("p", "No model is flagged.")])]
