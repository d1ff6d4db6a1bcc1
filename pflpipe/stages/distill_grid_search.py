"""Stage `distill_grid_search`: PersFL stage 2.

Every client × every (λ, T) student is trained at once from the client's teacher; each client keeps
the pair best on the selection split.
"""

import hashlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from pflpipe import layout, markdown
from pflpipe.beside import Beside
from pflpipe.distill import GridConfig, GridResult, chosen_history, run_grid
from pflpipe.distill.lambda_t_figure import lambda_t_figure
from pflpipe.events import notice
from pflpipe.tracking import NULL_TRACKER, Tracker
from pflpipe.tracking import results_logging as track_results
from pflpipe.training import csv_tables, results_files, resumable_rounds, score_rows, stage_setup

STAGE = "distill_grid_search"
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
    (`pflpipe.stages.merge_shards` merges the shards' directories). The λ–T figure is drawn by a
    forked process (`pflpipe.beside`), which imports matplotlib while this one trains.
    """
    with Beside(lambda_t_figure, preload=("matplotlib.figure",), name="λ–T figure") as figure:
        summary = _distil(spec, seed, Path(partition_dir), Path(checkpoints_dir),
                          Path(teachers_dir), Path(results_dir), figure, shard)
        figure.result()
    track_results.track_model(tracker, spec, seed, Path(results_dir), Path(partition_dir))
    return summary


def run_members(spec, seeds: list[int], partition_dirs: list[Path], checkpoints_dirs: list[Path],
                teachers_dirs: list[Path], results_dirs: list[Path], *, resume: str = "all"
                ) -> list[DistillResult]:
    """`run` of every seed of `seeds`, their grids trained as members of one job.

    Every seed × client × (λ, T) student is a member (`pflpipe.distill.run_grids`); each seed's
    grid is kept in its own store (`_store`), where the seed's `run` finds it and trains nothing,
    and each seed's results directory is written as its `run` writes it. The directories are
    each seed's, in the order of `seeds`; `resume` "all" reuses grids kept before.
    """
    from pflpipe.distill import chosen_histories, run_grids

    inputs = [_inputs(spec, seed, Path(p), Path(c), Path(t), None) for seed, p, c, t in zip(
        seeds, partition_dirs, checkpoints_dirs, teachers_dirs, strict=True)]
    stores = [_store(spec, seed, one, Path(c)) for seed, one, c in zip(
        seeds, inputs, checkpoints_dirs, strict=True)]
    if resume != "all" or not all(store.exists(layout.GRID_RESULT) for store in stores):
        s = inputs[0].setup
        args = ([one.setup.data for one in inputs], [one.params for one in inputs],
                [one.config for one in inputs])
        grids = run_grids(s.ctx, s.trainer, *args)
        histories = chosen_histories(s.ctx, s.trainer, *args, [g.chosen for g in grids])
        kept = list(zip(grids, histories, strict=True))
        for store, (grid, history) in zip(stores, kept, strict=True):
            buffer = io.BytesIO()
            torch.save({**vars(grid), "history": history}, buffer)
            store.put_bytes(layout.GRID_RESULT, buffer.getvalue())
    else:
        kept = [_kept(store) for store in stores]
    summaries = []
    for seed, one, grid, t, r in zip(seeds, inputs, kept, teachers_dirs, results_dirs,
                                     strict=True):
        with Beside(lambda_t_figure, preload=("matplotlib.figure",), name="λ–T figure") as fig:
            summaries.append(_write(spec, seed, one, *grid, Path(t), Path(r), fig, None))
            fig.result()
    return summaries


@dataclass
class _Inputs:
    """What a seed's grid starts from: its partition, teachers and settings."""

    setup: object        # `stage_setup.Setup`
    teachers: list[dict]
    params: dict         # each client's teacher [C, ...]
    config: GridConfig


def _inputs(spec, seed: int, partition_dir: Path, checkpoints_dir: Path, teachers_dir: Path,
            shard: int | None) -> _Inputs:
    s = stage_setup.setup(spec, seed, partition_dir, shard)
    dist = spec.distillation
    teachers = json.loads((Path(teachers_dir) / layout.TEACHERS_JSON).read_text())["teachers"]
    mine = teachers[s.data.first_client:s.data.first_client + s.data.n_clients]
    rounds = {t["round"]: resumable_rounds.load_round(checkpoints_dir, t["round"], s.device)
              for t in mine}
    params = {k: torch.stack([rounds[t["round"]][k] for t in mine]) for k in s.init}
    selection_split = dist.selection_split
    if selection_split == "val" and not s.has_validation:
        selection_split = NO_VALIDATION_SPLIT
    config = GridConfig(
        lambdas=tuple(dist.lambdas), temperatures=tuple(dist.temperatures), epochs=dist.epochs,
        batch_size=dist.batch_size or spec.federation.batch_size,
        lr=dist.lr or spec.federation.lr, objective=dist.objective,
        selection_split=selection_split, optimizer=stage_setup.optimizer(spec), seed=seed)
    return _Inputs(s, teachers, params, config)


def _store(spec, seed: int, one: _Inputs, checkpoints_dir: Path):
    """The store of a seed's grid trained as members, keyed on all the grid depends on.

    The teachers count by their round files' bytes (the warm start's output).
    """
    rounds = sorted({t["round"] for t in one.teachers})
    digests = {r: hashlib.sha256(layout.round_file(checkpoints_dir, r).read_bytes()).hexdigest()
               for r in rounds}
    return resumable_rounds.checkpoint_store(spec, STAGE, {
        "seed": seed, "partition": one.setup.partition_hash, "teachers": one.teachers,
        "rounds": digests, "distillation": spec.distillation.model_dump(mode="json"),
        "federation": spec.federation.model_dump(mode="json"),
        **stage_setup.engine_key(spec, one.setup)})[0]


def _kept(store) -> tuple[GridResult, list[dict]]:
    """A grid kept by `run_members`, and its chosen students' history."""
    kept = torch.load(io.BytesIO(store.get_bytes(layout.GRID_RESULT)), weights_only=True)
    history = kept.pop("history")
    return GridResult(**kept), history


def _distil(spec, seed: int, partition_dir: Path, checkpoints_dir: Path, teachers_dir: Path,
            out: Path, figure: Beside, shard: int | None) -> DistillResult:
    """`run` but the tracking: the figure's arguments go to `figure` once the grid is done.

    A grid its seeds trained as members (`run_members`) is read from its store, not trained.
    """
    one = _inputs(spec, seed, partition_dir, checkpoints_dir, teachers_dir, shard)
    store = None if shard is not None else _store(spec, seed, one, checkpoints_dir)
    if store is not None and store.exists(layout.GRID_RESULT):
        notice("reused the grid its seeds trained as members: nothing trained", reused=True)
        grid, history = _kept(store)
    else:
        grid = run_grid(one.setup.ctx, one.setup.trainer, one.setup.data, one.params, one.config)
        history = chosen_history(one.setup.ctx, one.setup.trainer, one.setup.data, one.params,
                                 one.config, grid.chosen)
    return _write(spec, seed, one, grid, history, teachers_dir, out, figure, shard)


def _write(spec, seed: int, one: _Inputs, grid: GridResult, history: list[dict],
           teachers_dir: Path, out: Path, figure: Beside, shard: int | None) -> DistillResult:
    """Write a seed's results directory from its grid and its chosen students' history."""
    s, teachers, config = one.setup, one.teachers, one.config
    out.mkdir(parents=True, exist_ok=True)
    figure.send(grid.grid, grid.chosen, out / FIGURES[0])
    model = model_name(spec)
    chosen = tuple({**c, "teacher_round": teachers[c["client"]]["round"]} for c in grid.chosen)
    results = [{"seed": seed, "client": c["client"], "model": model, "split": split,
                "selection": selection, "round": c["teacher_round"],
                "accuracy": c[f"{split}_accuracy"], "loss": c[f"{split}_loss"],
                "n_samples": int(s.data.split(split).counts[c["client"] - s.data.first_client])}
               for selection in ("best_val", "last_round")
               for split in stage_setup.scored_splits(s.data) for c in chosen]
    summary = DistillResult(model, chosen, sum(c["test_accuracy"] for c in chosen) / len(chosen),
                            config.selection_split, s.has_validation)
    models = results_files.client_models(grid.params, s.data.first_client)
    history = score_rows.history_rows(grid.epoch_compute(history, config.epochs,
                                                     s.data.first_client), model, seed)
    results_files.write_results(out, results, history, models, summary.to_markdown())
    csv_tables.write_csv(out / layout.GRID_CSV, GRID_FIELDS, grid.grid)
    csv_tables.write_csv(out / layout.CHOSEN_CSV, CHOSEN_FIELDS, list(chosen))
    for name in (layout.TEACHERS_CSV, FIGURES[1]):
        shutil.copyfile(Path(teachers_dir) / name, out / name)
    if shard is not None:
        results_files.write_shard(out, s.data, summary)
    return summary
