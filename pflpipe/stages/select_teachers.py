"""Stage `select_teachers`: each client's optimal teacher round.

It is chosen from the warm start's per-round × per-client validation scores (thesis eq. 4.1), or
is the last round (the Table 6.4 ablation, and the rule when there is no validation split).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from pflpipe import layout, markdown
from pflpipe.errors import DataError
from pflpipe.tracking import NULL_TRACKER, Tracker
from pflpipe.training.csv_tables import read_csv, write_csv

FIELDS = ("client", "round", "val_loss", "val_accuracy")


@dataclass(frozen=True)
class TeachersResult:
    """Each client's teacher round and its validation scores."""

    teachers: tuple[dict, ...]
    criterion: str
    last_round: int

    def to_markdown(self) -> str:
        """Table of chosen rounds (thesis Fig. 6.1 as numbers)."""
        lines = [f"**select_teachers** ({self.criterion}; last round {self.last_round})", "",
                 *markdown.table(["client", "round", "val loss", "val accuracy"],
                                 [[t["client"], t["round"], _number(t["val_loss"]),
                                   _number(t["val_accuracy"])] for t in self.teachers], "rrrr")]
        return "\n".join(lines) + "\n"


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def run(spec, checkpoints_dir: Path, teachers_dir: Path, *, tracker: Tracker = NULL_TRACKER
        ) -> TeachersResult:
    """Choose the teachers; write teachers.csv, teachers.json and teacher_rounds.png.

    NumPy, not torch: the process imports no torch (docs/performance.md, start-up).
    """
    import numpy as np

    from pflpipe.distill.lambda_t_figure import teacher_rounds_figure
    from pflpipe.distill.teachers import choose_rounds

    loss, accuracy, rounds = _matrices(Path(checkpoints_dir))
    criterion = spec.teachers.criterion
    validated = not np.isnan(loss).all()
    if not validated:
        criterion = "last round: no validation split"
    first = 1 if len(rounds) > 1 else 0   # round 0 is the untrained initial model
    if spec.distillation.teacher == "last_round" or not validated:
        rows = np.full(loss.shape[1], len(rounds) - 1)
    else:
        rows = choose_rounds(loss[first:], accuracy[first:], criterion) + first
    teachers = tuple({"client": c, "round": rounds[int(r)], "val_loss": _score(loss[r, c]),
                      "val_accuracy": _score(accuracy[r, c])}
                     for c, r in enumerate(rows.tolist()))
    out = Path(teachers_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / layout.TEACHERS_CSV, FIELDS, list(teachers))
    (out / layout.TEACHERS_JSON).write_text(json.dumps({"criterion": criterion,
                                                   "teacher": spec.distillation.teacher,
                                                   "teachers": list(teachers)}, indent=2))
    figure = teacher_rounds_figure([t["round"] for t in teachers], rounds[-1],
                                   out / layout.TEACHER_ROUNDS_PNG)
    result = TeachersResult(teachers, criterion, rounds[-1])
    tracker.log_params({"criterion": criterion, "teacher": spec.distillation.teacher})
    tracker.log_artifact(figure, "figures")
    return result


def _score(value) -> float | None:
    return None if value != value else float(value)  # NaN: no validation split


def _matrices(checkpoints_dir: Path):
    """[R, C] validation loss and accuracy of every round's global model, and the rounds.

    Without a validation split (round_metrics.csv has only test rows) both are NaN.
    """
    import numpy as np

    path = checkpoints_dir / layout.ROUND_METRICS_CSV
    if not path.is_file():
        raise DataError(f"{checkpoints_dir} has no {path.name}; run warm_start_fedavg first")
    every = read_csv(path)
    rows = [r for r in every if r["split"] == "val"]
    if not rows:
        rounds = sorted({int(r["round"]) for r in every})
        clients = {int(r["client"]) for r in every}
        loss = np.full((len(rounds), len(clients)), np.nan, dtype=np.float32)
        return loss, loss.copy(), rounds
    rounds = sorted({int(r["round"]) for r in rows})
    clients = sorted({int(r["client"]) for r in rows})
    position = {r: i for i, r in enumerate(rounds)}
    loss = np.full((len(rounds), len(clients)), np.nan, dtype=np.float32)  # as torch's were
    accuracy = np.full_like(loss, np.nan)
    for row in rows:
        i, c = position[int(row["round"])], int(row["client"])
        loss[i, c], accuracy[i, c] = float(row["loss"]), float(row["accuracy"])
    if np.isnan(loss).any():
        raise DataError(f"{path}: some client has no validation score in some round")
    return loss, accuracy, rounds
