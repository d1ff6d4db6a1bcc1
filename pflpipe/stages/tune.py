"""Stage `tune`: choose each tuned entry's setting from its grid points' validation scores.

Every grid point of an entry trains on every tuning seed (`pflpipe.stages.tune_point`, which
writes the point's score: the mean over clients of its validation accuracy, or MSE for a
regression, of each client's `evaluation.selection` model). This stage gathers those scores (from
the points' directories, or from `tune` directories of single seeds) and chooses, per entry, the
point with the best mean score over the tuning seeds; a tie goes to the point written first in
the grid. A point that diverged on any tuning seed (``"score": null``, `tune_point`) is never
chosen; when every point of an entry diverged, the stage fails naming the entry's grid. Test
splits are never read. Output, ``tuning.json``::

    {"seeds": [100, 101], "selection": "best_val", "score": "accuracy",
     "records": [{"entry": "ditto", "seed": 100, "values": {"lam": 0.1}, "score": 0.91}, ...],
     "entries": {"ditto": {"grid": {"lam": [...]}, "budget": {"max_points": 8, "rounds": null},
                           "points": [{"values": {...}, "scores": {"100": 0.91, ...},
                                       "mean": 0.9}, ...],   # a diverged one: "mean": null,
                                                             # "diverged": "seed 101: ..."
                           "chosen": {"lam": 0.1}}}}

The `personalize` tasks of the reported seeds read it (`apply`) and keep their entry's part next
to their results (`keep_record`), where the report finds it.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pflpipe.errors import DataError, DivergenceError
from pflpipe.layout import POINT_JSON, TUNING_JSON
from pflpipe.spec.tuning import read_tuning


@dataclass(frozen=True)
class TuningResult:
    """The setting chosen per entry, and the seeds it was chosen on."""

    seeds: tuple[int, ...]
    chosen: dict[str, dict]
    diverged: dict[str, int] = field(default_factory=dict)   # grid points scored as failed

    def to_markdown(self) -> str:
        """One line per tuned entry (the KFP Markdown artifact)."""
        lines = [f"**tune**: chosen on the validation splits of tuning seed(s) "
                 f"{', '.join(map(str, self.seeds))}", ""]
        lines += [f"- {label}: {json.dumps(values)}" + (
                  f" ({self.diverged[label]} diverged point(s) not chosen)"
                  if self.diverged.get(label) else "") for label, values in self.chosen.items()]
        return "\n".join(lines) + "\n"


def score_name(spec) -> str:
    """What a point is scored by: "accuracy" (higher is better), or "mse" for a regression."""
    from pflpipe.spec.dataset import task_of

    return "mse" if task_of(spec.dataset) == "regression" else "accuracy"


def validation_score(spec, rows: list[dict]) -> float:
    """Mean over clients of the validation score of each client's `evaluation.selection` model.

    Only the personalized model's rows count (not a global model's, scope "global").
    """
    column = "loss" if score_name(spec) == "mse" else "accuracy"
    values = [float(r[column]) for r in rows if r["split"] == "val" and not r.get("scope")
              and r["selection"] == spec.evaluation.selection]
    if not values:
        raise DataError("tuning: the results hold no validation rows; settings are chosen on "
                        "the validation split (give partition.fractions.val a fraction)")
    return math.fsum(values) / len(values)


def run(spec, scored_dirs: list[Path], out_dir: Path) -> TuningResult:
    """Gather the scores under `scored_dirs`, choose each entry's setting; write tuning.json."""
    records = _gather(list(map(Path, scored_dirs)))
    seeds = sorted({r["seed"] for r in records})
    higher = score_name(spec) == "accuracy"
    entries = {}
    for index, tuned in enumerate(spec.tuning.entries):
        points = [_point(tuned.entry, values, records, seeds) for values in tuned.points()]
        means = [p["mean"] for p in points if p["mean"] is not None]
        if not means:
            raise DivergenceError(
                f"tuning.entries[{index}] ({tuned.entry!r}): every grid point diverged on the "
                f"tuning seeds ({'; '.join(p['diverged'] for p in points)}); change the values "
                f"of tuning.entries[{index}].grid (a lower lr, say)")
        best = [p["mean"] for p in points].index(max(means) if higher else min(means))
        entries[tuned.entry] = {
            "grid": tuned.grid, "budget": spec.tuning.budget_of(tuned).model_dump(),
            "points": points, "chosen": points[best]["values"]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / TUNING_JSON).write_text(json.dumps({
        "seeds": seeds, "selection": spec.evaluation.selection, "score": score_name(spec),
        "records": records, "entries": entries}, indent=2) + "\n")
    return TuningResult(tuple(seeds), {label: e["chosen"] for label, e in entries.items()},
                        {label: sum(bool(p.get("diverged")) for p in e["points"])
                         for label, e in entries.items()})


def _gather(dirs: list[Path]) -> list[dict]:
    records = []
    for directory in dirs:
        if (directory / POINT_JSON).is_file():
            records.append(json.loads((directory / POINT_JSON).read_text()))
        elif (directory / TUNING_JSON).is_file():
            records += json.loads((directory / TUNING_JSON).read_text())["records"]
        else:
            raise DataError(f"{directory} holds neither {POINT_JSON} nor {TUNING_JSON}; tune "
                            "reads the directories of tune_point or tune tasks")
    return records


def _point(label: str, values: dict, records: list[dict], seeds: list[int]) -> dict:
    key = json.dumps(values, sort_keys=True)
    scores = {r["seed"]: r["score"] for r in records
              if r["entry"] == label and json.dumps(r["values"], sort_keys=True) == key}
    missing = [s for s in seeds if s not in scores]
    if missing:
        raise DataError(f"tuning: grid point {key} of {label!r} has no score for tuning seed(s) "
                        f"{missing}; every point trains on every tuning seed")
    diverged = [f"seed {r['seed']}: {r['diverged']}" for r in records if r["entry"] == label
                and r.get("diverged") and json.dumps(r["values"], sort_keys=True) == key]
    mean = None if diverged else math.fsum(scores.values()) / len(scores)
    return {"values": values, "scores": {str(s): scores[s] for s in seeds}, "mean": mean,
            **({"diverged": "; ".join(diverged)} if diverged else {})}


def seed_of(dirs: list[Path]) -> int | None:
    """The one tuning seed whose grid points `dirs` hold (a seed's `tune` task), else None.

    Names the task (``tune · seed 7``) apart from the `tune` over every seed; never raises (a
    directory it cannot read is left to `run` to report).
    """
    try:
        seeds = {json.loads((Path(d) / POINT_JSON).read_text())["seed"] for d in dirs}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next(iter(seeds)) if len(seeds) == 1 else None


def keep_record(tuning_dir: Path, label: str, results_dir: Path) -> None:
    """Write tuning.json holding only entry `label` (its grid, scores, choice) to its results."""
    whole = read_tuning(tuning_dir)
    (Path(results_dir) / TUNING_JSON).write_text(json.dumps({
        **whole, "records": [r for r in whole["records"] if r["entry"] == label],
        "entries": {label: whole["entries"][label]}}, indent=2) + "\n")
