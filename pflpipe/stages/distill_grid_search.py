"""Stage `distill_grid_search`: PersFL stage 2.

Every client × every (λ, T) student is trained at once from the client's teacher; each client keeps
the pair best on the selection split.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from pflpipe import layout, markdown
from pflpipe.distill import GridConfig, chosen_history, run_grid
from pflpipe.distill.figures import lambda_t_figure
from pflpipe.stages import common, track_results
from pflpipe.stages.beside import Beside
from pflpipe.tracking import NULL_TRACKER, Tracker

#: Where (λ, T) is chosen when the partition has no validation split.
NO_VALIDATION_SPLIT = "train"
GRID_FIELDS = ("client", "lam", "temperature", "train_loss", "train_accuracy", "val_loss",
               "val_accuracy", "test_loss", "test_accuracy")
CHOSEN_FIELDS = ("client", "teacher_round", *GRID_FIELDS[1:])
#: The figures of a PersFL results directory: λ–T interaction, teacher rounds (copied).
FIGURES = (layout.LAMBDA_T_PNG, layout.TEACHER_ROUNDS_PNG)


@dataclass(frozen=True)
class DistillResult:
    """The chosen (λ, T) per client and the mean test accuracy of the chosen students."""

    model: str
    chosen: tuple[dict, ...]
    test_accuracy: float
    selection_split: str
    has_validation: bool = True

    def to_markdown(self) -> str:
        """The chosen pairs per client (thesis Table 6.5)."""
        leak = (" **(chosen on test: the reported accuracy is optimistic)**"
                if self.selection_split == "test" else
                " (no validation split)" if not self.has_validation else "")
        lines = [f"**{self.model}**: mean client test accuracy {self.test_accuracy:.4f}; (λ, T) "
                 f"chosen per client on {self.selection_split}{leak}", "",
                 *markdown.table(
                     ["client", "teacher round", "λ", "T", "val accuracy", "test accuracy"],
                     [[c["client"], c["teacher_round"], f"{c['lam']:g}", f"{c['temperature']:g}",
                       f"{c['val_accuracy']:.4f}", f"{c['test_accuracy']:.4f}"]
                      for c in self.chosen], "rrrrrr")]
        return "\n".join(lines) + "\n"


def model_name(spec) -> str:
    """`persfl` for the KL objective, `persfl_gd` for the soft cross-entropy variant."""
    return spec.distillation.model_name


def run(spec, seed: int, partition_dir: Path, checkpoints_dir: Path, teachers_dir: Path,
        results_dir: Path, *, tracker: Tracker = NULL_TRACKER, shard: int | None = None
        ) -> DistillResult:
    """Distil every client's teacher over the grid; write results, grid and figures.

    history.csv holds each client's chosen student per epoch (epoch 0: the teacher); the
    teachers' table and figure are copied from `teachers_dir`, so the results directory tells
    the whole of PersFL. With `shard` = k, only the k-th of `engine.shards` client shards
    (`pflpipe.stages.shards` merges the shards' directories). The λ–T figure is drawn by a
    forked process (`pflpipe.stages.beside`), which imports matplotlib while this one trains.
    """
    with Beside(lambda_t_figure, preload=("matplotlib.figure",), name="λ–T figure") as figure:
        summary = _distil(spec, seed, Path(partition_dir), Path(checkpoints_dir),
                          Path(teachers_dir), Path(results_dir), figure, shard)
        figure.result()
    track_results.track_model(tracker, spec, seed, Path(results_dir), Path(partition_dir))
    return summary


def _distil(spec, seed: int, partition_dir: Path, checkpoints_dir: Path, teachers_dir: Path,
            out: Path, figure: Beside, shard: int | None) -> DistillResult:
    """`run` but the tracking: the figure's arguments go to `figure` once the grid is done."""
    s = common.setup(spec, seed, partition_dir, shard)
    dist = spec.distillation
    teachers = json.loads((Path(teachers_dir) / layout.TEACHERS_JSON).read_text())["teachers"]
    mine = teachers[s.data.first_client:s.data.first_client + s.data.n_clients]
    rounds = {t["round"]: common.load_round(checkpoints_dir, t["round"], s.device)
              for t in mine}
    params = {k: torch.stack([rounds[t["round"]][k] for t in mine]) for k in s.init}
    selection_split = dist.selection_split
    if selection_split == "val" and not s.has_validation:
        selection_split = NO_VALIDATION_SPLIT
    config = GridConfig(
        lambdas=tuple(dist.lambdas), temperatures=tuple(dist.temperatures), epochs=dist.epochs,
        batch_size=dist.batch_size or spec.federation.batch_size,
        lr=dist.lr or spec.federation.lr, objective=dist.objective,
        selection_split=selection_split, optimizer=common.optimizer(spec), seed=seed)
    grid = run_grid(s.ctx, s.trainer, s.data, params, config)
    out.mkdir(parents=True, exist_ok=True)
    figure.send(grid.grid, grid.chosen, out / FIGURES[0])
    model = model_name(spec)
    chosen = tuple({**c, "teacher_round": teachers[c["client"]]["round"]} for c in grid.chosen)
    results = [{"seed": seed, "client": c["client"], "model": model, "split": split,
                "selection": selection, "round": c["teacher_round"],
                "accuracy": c[f"{split}_accuracy"], "loss": c[f"{split}_loss"],
                "n_samples": int(s.data.split(split).counts[c["client"] - s.data.first_client])}
               for selection in ("best_val", "last_round")
               for split in common.scored_splits(s.data) for c in chosen]
    summary = DistillResult(model, chosen, sum(c["test_accuracy"] for c in chosen) / len(chosen),
                            selection_split, s.has_validation)
    models = common.client_models(grid.params, s.data.first_client)
    history = common.history_rows(grid.epoch_compute(
        chosen_history(s.ctx, s.trainer, s.data, params, config, grid.chosen), config.epochs,
        s.data.first_client), model, seed)
    common.write_results(out, results, history, models, summary.to_markdown())
    common.write_csv(out / layout.GRID_CSV, GRID_FIELDS, grid.grid)
    common.write_csv(out / layout.CHOSEN_CSV, CHOSEN_FIELDS, list(chosen))
    for name in (layout.TEACHERS_CSV, FIGURES[1]):
        shutil.copyfile(Path(teachers_dir) / name, out / name)
    if shard is not None:
        common.write_shard(out, s.data, summary)
    return summary
