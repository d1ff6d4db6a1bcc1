"""The files on disk: the directories stages share and the name of every file in them.

This module is the only code that spells a file name of these directories (docs/contracts.md);
stages, the engine, the CLI and the pipeline ask it. To add a file, add its name here (and its
line in docs/contracts.md); `tests/unit/test_layout.py` checks that no other module spells it.
It imports nothing heavy, so every layer may use it.

A **results directory** (one model of one seed: warm_start_fedavg's, train_local's, a
personalize entry's, distill_grid_search's)::

    results.csv  history.csv  summary.md  models/<name>.pt  [shard.json]  [grid.csv chosen.csv ...]

A **checkpoint directory** (or store)::

    round_0000.pt ... round_NNNN.pt  state_NNNN.pt  rows_NNNN.pt ...  progress.json
    [round_metrics.csv]  [models/client_NNNN.pt: a finished stage's, links of its results']

A **partition directory**: ``manifest.json``, ``clients/client_NNNN.pt``, the label heatmap.
A **collected directory** (collect_results, one seed): the results directory of every model by
name, ``collected.json``, ``sources.json``, ``results.csv`` (all models) and ``partition/``.
A **report directory**: ``report.json``, ``report.md``, ``report.html``, ``figures/``.
A **worker task** (a sharded stage's, in a store: `pflpipe.engine.distributed`)::

    task.pkl  [result.pt | error.pkl]  files/<sha256>...

An **export directory** (``pflpipe split --export``: `pflpipe.data.export`, `.reproduce`): the
format's own files (PFLlib's ``config.json``, Flower's ``partitions.json``, ``indices.npz``),
the record ``.pflpipe-written.json`` (`pflpipe.overwrite`) and the reproduction package
(``reproduce.json``, ``initial_weights.pt``, ``model_script.pt``, ``README.md``, the app's
``pflpipe_fedavg/``).
A **results root** (``pflpipe run``): ``runs/<time>-<run>/``, ``latest``, ``logs/``
(``pipeline.log``, ``events.jsonl``, one ``<task>.log`` per task).
"""

import json
import os
import re
import shutil
from pathlib import Path

from pflpipe.errors import DataError

# ---- a results directory ------------------------------------------------------------------
#: Per-client final results; per-client, per-round history; a Markdown summary of the stage.
RESULTS_CSV, HISTORY_CSV, SUMMARY_MD = "results.csv", "history.csv", "summary.md"
#: The folder of a results directory's state_dicts (one per client, and any global model).
MODELS = "models"
#: What a client shard's results directory says of itself (`pflpipe.stages.merge_shards`).
SHARD_JSON = "shard.json"
#: distill_grid_search: every (λ, T) tried per client, and the pair chosen per client.
GRID_CSV, CHOSEN_CSV = "grid.csv", "chosen.csv"
#: select_teachers: each client's teacher round (a table, and the JSON the next stage reads).
TEACHERS_CSV, TEACHERS_JSON = "teachers.csv", "teachers.json"
#: PersFL's figures: the λ–T interaction, and the teacher rounds (select_teachers draws it).
LAMBDA_T_PNG, TEACHER_ROUNDS_PNG = "lambda_t.png", "teacher_rounds.png"
#: `pflpipe personalize-new`: the new client's teacher, and its one model.
TEACHER_JSON, MODEL_PT = "teacher.json", "model.pt"
#: tune: the setting chosen per tuned entry (also kept in its results directory); tune_point:
#: what a grid point's directory says of its point.
TUNING_JSON, POINT_JSON = "tuning.json", "point.json"
#: warm_start_fedavg's global model of the round with the best validation loss (in models/).
GLOBAL_BEST_VAL = "global_best_val"


def model_file(results_dir: Path, name: str) -> Path:
    """The state_dict `name` (``client_0003``, ``global_best_val``) of a results directory."""
    return Path(results_dir) / MODELS / f"{name}.pt"


def client_file(client: int) -> str:
    """The name (no suffix) of a client's model file in a results directory's models/."""
    return f"client_{client:04d}"


def client_model_files(results_dir: Path) -> list[Path]:
    """Every client's model file of a results directory, in client order."""
    return sorted((Path(results_dir) / MODELS).glob("client_*.pt"))


# ---- a checkpoint directory ---------------------------------------------------------------
#: The folder of every stage's checkpoint stores in a results root (or a bucket's prefix).
CHECKPOINTS = "checkpoints"
#: Written last after every round: rounds completed, stopped early, the configuration's key.
PROGRESS_JSON = "progress.json"
#: distill_grid_search: a grid trained as members of its seeds' job, kept for the seed's task.
GRID_RESULT = "grid_result.pt"
#: warm_start_fedavg: every round's per-client validation and test scores.
ROUND_METRICS_CSV = "round_metrics.csv"
_ROUND, _STATE, _ROWS = "round_{:04d}.pt", "state_{:04d}.pt", "rows_{:04d}.pt"
_ROUND_KEY = re.compile(r"round_(\d{4,})\.pt")
_ROWS_KEY = re.compile(r"rows_(\d{4,})\.pt")


def stage_checkpoints(stage: str, digest: str) -> str:
    """Where (under the storage root) a stage's checkpoints for one configuration are kept."""
    return f"{CHECKPOINTS}/{stage}/{digest}"


def round_key(round_idx: int) -> str:
    """The file of one round's global state_dict (``round_0012.pt``)."""
    return _ROUND.format(round_idx)


def state_key(round_idx: int) -> str:
    """The file of everything else a resumed run needs after one round (``state_0012.pt``)."""
    return _STATE.format(round_idx)


def rows_key(round_idx: int) -> str:
    """The file of the score rows added since the previous checkpoint (``rows_0012.pt``)."""
    return _ROWS.format(round_idx)


def rows_round_of(key: str) -> int | None:
    """The round of a rows file's name; None for any other name.

    >>> rows_round_of("rows_0012.pt"), rows_round_of("round_0012.pt")
    (12, None)
    """
    match = _ROWS_KEY.fullmatch(key)
    return int(match.group(1)) if match else None


def round_of(key: str) -> int | None:
    """The round of a round file's name; None for any other name.

    >>> round_of("round_0012.pt"), round_of("state_0012.pt"), round_of("progress.json")
    (12, None, None)
    """
    match = _ROUND_KEY.fullmatch(key)
    return int(match.group(1)) if match else None


def is_state_key(key: str) -> bool:
    """Whether `key` names a state file (``state_NNNN.pt``)."""
    return key.startswith("state_") and key.endswith(".pt")


def round_file(directory: Path, round_idx: int) -> Path:
    """The file of one round's global state_dict in a checkpoint directory; DataError if none."""
    path = Path(directory) / round_key(round_idx)
    if not path.is_file():
        raise DataError(f"{directory}: no checkpoint for round {round_idx} ({path.name})")
    return path


def rounds_in(directory: Path) -> list[int]:
    """The rounds whose global state_dict a checkpoint directory holds, ascending."""
    return sorted(r for p in Path(directory).iterdir() if (r := round_of(p.name)) is not None)


def read_progress(directory: Path) -> dict | None:
    """The progress record of a checkpoint directory; None when it holds none."""
    path = Path(directory) / PROGRESS_JSON
    return json.loads(path.read_text()) if path.is_file() else None


# ---- a partition directory ----------------------------------------------------------------
#: The folder of every seed's partition in a results root (``partition/seed-0``).
PARTITIONS = "partition"


def partition_dir(results_root: Path, seed: int) -> Path:
    """The partition directory of one seed in a results root."""
    return Path(results_root) / PARTITIONS / seed_folder(seed)

#: Counts, seed, content hash and the clients' files of a partition.
MANIFEST_JSON = "manifest.json"
#: The clients' label distribution, drawn by partition_data.
HEATMAP_PNG = "label_distribution.png"
#: The folder of the clients' tensors.
CLIENTS = "clients"


def partition_client_file(client_id: int, width: int = 4) -> str:
    """The file of one client's tensors in a partition's clients/ (``client_0003.pt``)."""
    return f"client_{client_id:0{width}d}.pt"


def stale_partition_files(clients_dir: Path) -> list[Path]:
    """Every client file in a partition's clients/ (removed before a partition is rewritten)."""
    return sorted(Path(clients_dir).glob("client_*.pt"))


# ---- a collected directory (collect_results, one seed) -----------------------------------
#: The seed and the models a collected directory holds; where each model's files came from.
COLLECTED_JSON, SOURCES_JSON = "collected.json", "sources.json"
#: The copy of the partition's manifest and heatmap in a collected directory (``partition/``).
PARTITION = PARTITIONS

# ---- a report directory (evaluate_fairness) ---------------------------------------------
REPORT_JSON, REPORT_MD, REPORT_HTML = "report.json", "report.md", "report.html"
#: Every pair of models compared, per split and question (`pflpipe.report.pairwise_section`).
PAIRWISE_CSV = "pairwise.csv"
#: The report's figures, and the copies of the tables it links (inside the report directory, so
#: its links hold when the directory is copied or uploaded alone).
FIGURES, REPORT_TABLES = "figures", "tables"
#: The report cache of a rerun (`pflpipe.report.report_cache`, in the stage's checkpoint store):
#: the figures drawn for a key, and the MLflow run that logged its seeds.
CACHED_FIGURES_JSON, CACHED_LOGGED_JSON = "figures.json", "logged.json"


def report_table(seed: int) -> str:
    """A seed's results table in a report directory: ``tables/seed-<seed>/results.csv``.

    >>> report_table(3)
    'tables/seed-3/results.csv'
    """
    return f"{REPORT_TABLES}/{seed_folder(seed)}/{RESULTS_CSV}"


def report_figure(kind: str, name: str = "") -> str:
    """A figure's path in a report directory: ``figures/<kind>[_<name>].png``.

    >>> report_figure("qoi", "test"), report_figure("diagnostics", "flow · paper")
    ('figures/qoi_test.png', 'figures/diagnostics_flow_paper.png')
    """
    stem = f"{kind}_{re.sub(r'[^A-Za-z0-9_-]+', '_', name)}" if name else kind
    return f"{FIGURES}/{stem}.png"

# ---- a results root (``pflpipe run``: experiment.results_dir) -----------------------------
#: Every published run's folder (``runs/<time>-<run>/``: report/, seed-N/), the link to the
#: newest one, and the runner's logs (``pipeline.log`` and one file per task).
RUNS, LATEST, LOGS, PIPELINE_LOG = "runs", "latest", "logs", "pipeline.log"
#: In logs/: every task's events (`pflpipe.events`), one JSON object a line with its task's title.
EVENTS_JSONL = "events.jsonl"
#: kfp.local's cache of finished tasks' outputs (one ``<key>.json`` per task).
KFP_CACHE = ".kfp_cache"


def task_log(title: str) -> str:
    """The log file (in logs/) of a task by its title (``personalize_fedper_seed_0.log``)."""
    return f"{re.sub(r'[^A-Za-z0-9-]+', '_', title).strip('_')}.log"


def seed_folder(seed: int) -> str:
    """A seed's folder in a published run (``seed-0``)."""
    return f"seed-{seed}"


# ---- a sweep's published run (`pflpipe.spec.sweep`) ---------------------------------------
#: The folder of a sweep's points in a published run: ``points/<label>/{report,seed-N}``.
POINTS = "points"
#: The sweep report's facts (beside report.md, report.html and figures/ in ``report/``).
SWEEP_JSON = "sweep.json"
#: A point's label and overrides, in its folder (`pflpipe report` rebuilds the sweep from them).
POINT_JSON = "point.json"
#: The report's folder in a published run (a sweep's, and each point's).
REPORT_FOLDER = "report"


def point_folder(label: str) -> str:
    """A sweep point's folder in a published run (``points/alpha=0.1``)."""
    return f"{POINTS}/{re.sub(r'[^A-Za-z0-9=,.()_+-]+', '_', label)}"
# ---- an algorithm's MLflow run (`pflpipe.tracking.client_tables.log_clients`) -------------------
#: A row per client (its final values), a row per client and round (its history), and the name
#: of the artifact of every client's state_dict (``models/clients.pt``).
CLIENTS_TABLE, CLIENT_HISTORY_TABLE, CLIENT_MODELS = (
    "clients/final.json", "clients/history.json", "clients")


def link_file(source: Path, target: Path) -> Path:
    """Make `target` a hard link to `source` (a copy on another file system); return `target`.

    Finished outputs are shared this way, never copied twice on one disk: a published run's
    files and kfp.local's task outputs, a collected seed and its models' results directories,
    a reused partition, a finished stage's checkpoint and its results' model files
    (`checkpoint.compact`), a local MLflow artifact store and the files logged into it. A
    finished output is never written again (a rerun's tasks write new folders; a results
    directory's model file is replaced, not rewritten), so neither name sees the other change;
    a user who edits a published file in place edits kfp's cached copy too (docs/results.md).
    """
    Path(target).unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)
    return Path(target)


def link_tree(source: Path, target: Path) -> Path:
    """`shutil.copytree` of `source` to `target` (may exist) with every file a `link_file`."""
    return Path(shutil.copytree(source, target, copy_function=link_file, dirs_exist_ok=True))


# ---- an export directory (`pflpipe split --export`) ----------------------------------------
#: PFLlib's dataset description; Flower's partition description; the npz format's index file.
PFLLIB_CONFIG_JSON, FLOWER_PARTITIONS_JSON, EXPORT_INDEX_NPZ = (
    "config.json", "partitions.json", "indices.npz")
#: The reproduction package: settings and batch-order rule, the seeded initial model, the
#: network as TorchScript (when no model code is exported), how to run it.
REPRODUCE_JSON, INITIAL_WEIGHTS_PT, MODEL_SCRIPT_PT, README_MD = (
    "reproduce.json", "initial_weights.pt", "model_script.pt", "README.md")
#: The exported Flower app's project file.
PYPROJECT_TOML = "pyproject.toml"
#: What the exported apps write into the directory themselves (their copies of these names live
#: in the app, `pflpipe/data/flower_app/`, which runs without pflpipe).
APP_OUTPUTS = ("flower_history.json", "pfllib_history.json")


# ---- a directory a command writes into (`pflpipe.overwrite`) --------------------------------
#: Which command wrote which files there, with their SHA-256 (the same command replaces exactly
#: those, unchanged).
WRITTEN_JSON = ".pflpipe-written.json"


def written_record(file_name: str) -> str:
    """The record beside a single file a command wrote (``compile -o``, ``schema -o``)."""
    return f".{file_name}.pflpipe-written.json"


# ---- a compiled pipeline ------------------------------------------------------------------
def compiled_pipeline(experiment: str) -> str:
    """The default file of a spec's compiled pipeline (``pflpipe compile``, ``submit``)."""
    return f"{experiment}.yaml"


# ---- a worker task (a sharded stage's workers: `pflpipe.engine.distributed`) --------------
#: What the workers run (``make`` and its arguments), rank 0's result, a worker's library error.
WORKER_TASK, WORKER_RESULT, WORKER_ERROR = "task.pkl", "result.pt", "error.pkl"
#: The folder of the files a task carries, each under its SHA-256.
WORKER_FILES = "files"
#: The folder of a stage's worker tasks beside its checkpoints.
WORKERS = "workers"


def worker_task(digest: str) -> str:
    """Where (under a stage's checkpoint store) the worker task of one digest is kept."""
    return f"{WORKERS}/{digest}"


def worker_file(sha256: str) -> str:
    """The key of one carried file in a worker task."""
    return f"{WORKER_FILES}/{sha256}"
