"""Client shards of the stages whose clients train alone, merged into one results directory.

With `engine.shards` = N, the local baseline, PersFL's distillation grid and the personalization
entries whose clients train alone (`fedavg_ft`) run as N pipeline tasks, task k on the k-th
contiguous shard of the clients (`stage_setup.client_shards`). A client keeps
its id in its shard, and every random draw of its training is keyed by that id, so it trains as
it would among all clients. `run` joins the shards' results directories into the one the
unsharded stage writes: the tables row by row (a stage writes its tables client by client, so
the shards' rows sorted by client are the unsharded table), every client's model file, the
summary and PersFL's λ–T figure computed again over all clients, and what every shard holds
whole (the teachers' table and figure) once.
"""

import csv
import json
import shutil
from pathlib import Path

from pflpipe import layout
from pflpipe.distill.lambda_t_figure import lambda_t_figure
from pflpipe.errors import DataError
from pflpipe.report import report_notes as notes
from pflpipe.stages.distill_grid_search import FIGURES, DistillResult
from pflpipe.stages.personalize import PersonalizeResult
from pflpipe.training import csv_tables, score_rows

#: The tables of a results directory that hold rows of the shard's own clients.
TABLES = (layout.RESULTS_CSV, layout.HISTORY_CSV, layout.GRID_CSV, layout.CHOSEN_CSV)
#: Written again over all clients (the summary, the λ–T figure) or not kept (the shard's record).
RECOMPUTED = (layout.SUMMARY_MD, FIGURES[0], layout.SHARD_JSON)


def run(shard_dirs: list[Path], out_dir: Path) -> DistillResult | PersonalizeResult:
    """Merge the results directories of every shard of one stage into `out_dir`.

    The shards may come in any order; together they must hold every client once.
    """
    shards = sorted(((_record(Path(d)), Path(d)) for d in shard_dirs),
                    key=lambda item: item[0]["clients"][0])
    expected = 0
    for record, directory in shards:
        first, count = record["clients"]
        if first != expected:
            raise DataError(f"{directory}: the shards do not hold every client once: this one "
                            f"starts at client {first}, the shards before it end at client "
                            f"{expected - 1}")
        expected = first + count
    whole = shards[0][0]["of"]
    if expected != whole:
        raise DataError(f"{shards[-1][1]}: the shards do not hold every client once: the last "
                        f"ends at client {expected - 1}, and there are {whole} clients "
                        f"(0–{whole - 1})")
    out = Path(out_dir)
    (out / layout.MODELS).mkdir(parents=True, exist_ok=True)
    first_dir = shards[0][1]
    for path in sorted(first_dir.iterdir()):
        if path.name in TABLES:
            _merge_table([directory / path.name for _, directory in shards], out / path.name)
        elif path.name == layout.MODELS:
            for _, directory in shards:
                for model in sorted((directory / layout.MODELS).iterdir()):
                    layout.link_file(model, out / layout.MODELS / model.name)
        elif path.name not in RECOMPUTED:
            shutil.copyfile(path, out / path.name)
    summary = _summary([record["summary"] for record, _ in shards], out)
    (out / layout.SUMMARY_MD).write_text(summary.to_markdown())
    return summary


def _record(directory: Path) -> dict:
    path = directory / layout.SHARD_JSON
    if not path.is_file():
        raise DataError(f"{directory} is not the results directory of a client shard (no "
                        f"{layout.SHARD_JSON})")
    return json.loads(path.read_text())


def _merge_table(paths: list[Path], out: Path) -> None:
    with paths[0].open(newline="") as handle:
        fields = tuple(next(csv.reader(handle)))
    csv_tables.write_csv(out, fields, [row for path in paths for row in csv_tables.read_csv(path)])


def _summary(parts: list[dict], out: Path) -> DistillResult | PersonalizeResult:
    """The stage's summary over every client, from the merged tables."""
    if "chosen" in parts[0]:
        chosen = tuple(_numbers(row) for row in csv_tables.read_csv(out / layout.CHOSEN_CSV))
        grid = [_numbers(row) for row in csv_tables.read_csv(out / layout.GRID_CSV)]
        lambda_t_figure(grid, list(chosen), out / FIGURES[0])
        return DistillResult(**{**parts[0], "chosen": chosen, "test_accuracy": sum(
            c["test_accuracy"] for c in chosen) / len(chosen)})
    results = [{**row, "accuracy": float(row["accuracy"])}
               for row in csv_tables.read_csv(out / layout.RESULTS_CSV)]
    counts = [v for (model, _), v in notes.started_better(
        csv_tables.read_csv(out / layout.HISTORY_CSV)).items() if model == parts[0]["model"]]
    return PersonalizeResult(**{**parts[0], **{
        f"{selection}_test_accuracy": score_rows.mean_test_accuracy(results, selection)
        for selection in ("best_val", "last_round")},
        "started_better": (sum(c[0] for c in counts), sum(c[1] for c in counts))})


def _numbers(row: dict) -> dict:
    """A row of PersFL's grid or chosen table with its numbers as numbers (ids as ints)."""
    return {key: int(value) if key in ("client", "teacher_round") else float(value)
            for key, value in row.items()}
