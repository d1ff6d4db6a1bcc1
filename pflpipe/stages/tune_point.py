"""Stage `tune_point`: one grid point of a tuned entry on one tuning seed, scored on validation.

The spec it receives holds the entry at the grid point's values (and the budget's rounds,
`pflpipe.spec.tuning.point_entry`); the entry trains as `personalize` trains it, and the
point's score (`pflpipe.stages.tune.validation_score`) goes to ``point.json`` next to its results.
A point whose training diverges (a NaN loss) is scored as failed: ``point.json`` says why
(``"score": null, "diverged": "..."``), the stage warns and succeeds, and `tune` chooses among
the other points.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from pflpipe import layout
from pflpipe.errors import DataError, DivergenceError
from pflpipe.events import warning
from pflpipe.stages import personalize, tune
from pflpipe.training.csv_tables import read_csv

STAGE = "tune_point"


@dataclass(frozen=True)
class PointScore:
    """One grid point's mean client validation score on one tuning seed."""

    entry: str
    seed: int
    values: dict
    score: float | None          # None: the point diverged
    diverged: str | None = None  # why (the DivergenceError's message)

    def to_markdown(self) -> str:
        """One line for the KFP Markdown artifact."""
        outcome = (f"diverged ({self.diverged}); scored as failed" if self.score is None else
                   f"mean client validation score {self.score:.4f}")
        return (f"**tune_point** {self.entry} {json.dumps(self.values)}, tuning seed {self.seed}: "
                f"{outcome}\n")


def run(spec, seed: int, label: str, values: dict, partition_dir: Path,
        checkpoints_dir: Path | None, out_dir: Path, *, progress: bool = False,
        resume: str = "all") -> PointScore:
    """Train entry `label` of `spec` (already at the point's `values`) on `seed`; score it."""
    try:
        personalize.run(spec, seed, label, partition_dir, checkpoints_dir, out_dir, stage=STAGE,
                        progress=progress, resume=resume)
    except DivergenceError as err:
        return _failed(seed, label, values, Path(out_dir), err)
    return _score(spec, seed, label, values, Path(out_dir))


def run_members(points: list[tuple], seeds: list[int], partition_dirs: list[Path],
                checkpoints_dirs: list[Path] | None, out_dirs: list[list[Path]], *,
                progress: bool = False, resume: str = "all") -> list[list[PointScore]]:
    """`run` of every (spec, label, values) of `points` on every seed, as members of one run.

    The points are one entry's grid points at values it takes per member (its `member_params`,
    `pflpipe.engine.variants`); each (point, seed) ends with its own `run`'s files, to the bit.
    `out_dirs[i][j]`: point i, seed j.
    """
    try:
        personalize.run_variants([(spec, label) for spec, label, _ in points], seeds,
                                 partition_dirs, checkpoints_dirs, out_dirs, stage=STAGE,
                                 progress=progress, resume=resume)
    except DivergenceError as err:  # the seeds loop trains each point alone and scores it
        raise DataError(f"a grid point diverged ({err}); each point trains alone") from err
    return [[_score(spec, seed, label, values, Path(out)) for seed, out in zip(seeds, outs,
                                                                             strict=True)]
            for (spec, label, values), outs in zip(points, out_dirs, strict=True)]


def _score(spec, seed: int, label: str, values: dict, out_dir: Path) -> PointScore:
    """The point's score from its results; written to ``point.json`` beside them."""
    rows = read_csv(out_dir / layout.RESULTS_CSV)
    return _write(PointScore(label, seed, dict(values), tune.validation_score(spec, rows)),
                  out_dir)


def _failed(seed: int, label: str, values: dict, out_dir: Path, err: DivergenceError
            ) -> PointScore:
    """A diverged point, scored as failed (``"score": null``): tune chooses among the rest."""
    why = str(err).split(";")[0]   # where and how; the hint about federation.lr is not for a grid
    warning(f"grid point {json.dumps(values)} of {label!r} diverged on tuning seed {seed} "
            f"({why}); it is scored as failed and tune chooses among the other points")
    return _write(PointScore(label, seed, dict(values), None, why), out_dir)


def _write(result: PointScore, out_dir: Path) -> PointScore:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / layout.POINT_JSON).write_text(json.dumps(
        {"entry": result.entry, "seed": result.seed, "values": result.values,
         "score": result.score, **({"diverged": result.diverged} if result.diverged else {})})
        + "\n")
    return result
