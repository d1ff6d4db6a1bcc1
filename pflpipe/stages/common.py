"""What the training stages share.

Loading a partition onto the engine, the model, the checkpoint store of a stage, and writing a
results directory (docs/contracts.md).
"""

import csv
import dataclasses
import hashlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pflpipe import layout
from pflpipe.data.files import load_tensors
from pflpipe.engine import checkpoint, distributed
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.distributed import Recipe
from pflpipe.engine.federation import FederationResult
from pflpipe.engine.optim import OptimizerConfig, ServerOptimizerConfig
from pflpipe.engine.records import COMPUTE, DIAGNOSTIC_PREFIX, diagnostic_columns
from pflpipe.engine.trainer import Context, make_trainer
from pflpipe.engine.tree import Group, Tree
from pflpipe.engine.two_level import GaussianLikelihood
from pflpipe.errors import DataError
from pflpipe.layout import (  # noqa: F401 - common.RESULTS_CSV etc. for older callers
    HISTORY_CSV,
    RESULTS_CSV,
    SHARD_JSON,
    SUMMARY_MD,
    client_file,
    round_file,
)
from pflpipe.models import build_model, head_keys
from pflpipe.models.check import check_model
from pflpipe.stages.notice import note
from pflpipe.stages.tables import read_csv  # noqa: F401 - common.read_csv
from pflpipe.storage import Store, open_store
from pflpipe.tracking import Tracker, vocabulary

log = logging.getLogger(__name__)
RESULT_FIELDS = ("seed", "client", "model", "split", "selection", "round", "accuracy", "loss",
                 "n_samples", "scope")
HISTORY_FIELDS = ("seed", "client", "model", "round", "split", "loss", "accuracy", "scope")
#: Version of what the engine checkpoints; a new one never resumes from an older one's files.
CHECKPOINT_FORMAT = 3   # 3: the engine's train rows carry compute and diagnostics


@dataclass
class Setup:
    """A partition on the engine's device with the spec's model, context and trainer."""

    data: FederatedData
    ctx: Context
    trainer: object
    init: Group                 # the seeded initial parameters
    head: frozenset[str]
    partition_hash: str
    device: torch.device
    compiled: bool = False      # the batched trainer compiles its steps (engine.compile)

    @property
    def has_validation(self) -> bool:
        """Whether the clients have a validation split (a partition has it for all or none)."""
        return has_validation(self.data)


def has_validation(data: FederatedData) -> bool:
    """Whether the clients have validation samples."""
    return bool(data.val.counts.sum() > 0)


def scored_splits(data: FederatedData) -> tuple[str, ...]:
    """The splits results are reported on: val and test, or test alone without validation."""
    return ("val", "test") if has_validation(data) else ("test",)


def scored_rows(rows: list[dict], data: FederatedData) -> list[dict]:
    """The engine's round rows, by client id.

    Without the (empty, NaN) validation rows of a partition without a validation split.
    """
    rows = [{**r, "client": data.client_id(r["client"])} for r in rows]
    return rows if has_validation(data) else [r for r in rows if r["split"] != "val"]


def use_threads(engine) -> int:
    """Set torch's CPU threads to `engine.threads` when given; note the number the stage uses."""
    if engine.threads:
        torch.set_num_threads(engine.threads)
    count = torch.get_num_threads()
    note(f"{count} torch thread{'s' if count > 1 else ''}")
    return count


def device_of(engine) -> torch.device:
    """The device `engine.device` names ('auto': CUDA when available)."""
    if engine.device == "cuda" and not torch.cuda.is_available():
        raise DataError("engine.device is 'cuda' but no CUDA device is available; use 'auto' "
                        "or 'cpu'")
    if engine.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(engine.device)


def setup(spec, seed: int, partition_dir: Path, shard: int | None = None) -> Setup:
    """Load the partition and build the seeded model, context and trainer.

    With `shard` = k, the data holds only the k-th of the spec's `engine.shards` client shards
    (`client_shards`), its clients keeping their ids.
    """
    from pflpipe.data import load_partition

    use_threads(spec.engine)
    partition = load_partition(partition_dir)
    device = device_of(spec.engine)
    splits = {name: SplitData.from_clients([c.split(name).x for c in partition.clients],
                                           [c.split(name).y for c in partition.clients])
              for name in ("train", "val", "test")}
    data = FederatedData(**splits)
    if shard is not None:
        if not 0 <= shard < spec.engine.shards:
            raise DataError(f"shard {shard} does not exist: engine.shards is "
                            f"{spec.engine.shards}")
        bounds = client_shards(data.train.counts, spec.engine.shards)
        data = data.shard(bounds[shard], bounds[shard + 1])
        note(f"shard {shard + 1}/{spec.engine.shards}: clients {bounds[shard]}–"
             f"{bounds[shard + 1] - 1}")
    data = data.to(device)
    n_outputs = partition.n_classes if partition.task == "classification" else 1
    check_model(spec, partition.input_shape, n_outputs, len(data.train.counts))  # names the field
    model = build_model(spec.model, partition.input_shape, n_outputs, seed)
    ctx = (GaussianLikelihood(model.to(device), sigma_sq=spec.dataset.sigma_sq)
           if spec.dataset.name == "gaussian" else Context(model.to(device), partition.task))
    init = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
    compiled = spec.engine.mode == "batched" and use_compile(spec, data, device)
    return Setup(data, ctx, make_trainer(spec.engine.mode, ctx, spec.engine.max_members, compiled),
                 init, head_keys(model, spec.model), partition.content_hash, device, compiled)


def client_shards(counts: torch.Tensor, shards: int) -> list[int]:
    """Bounds [shards + 1] of contiguous client shards of about equal training samples.

    Every shard holds one client or more (the spec allows at most one shard per client).

    >>> client_shards(torch.tensor([90, 5, 5]), 3)
    [0, 1, 2, 3]
    >>> client_shards(torch.tensor([10, 10, 10, 10]), 2)
    [0, 2, 4]
    """
    bounds = distributed.shard_bounds(counts.clamp_min(1), shards)
    for k in range(1, shards):
        bounds[k] = max(bounds[k], bounds[k - 1] + 1)
    for k in range(shards - 1, 0, -1):
        bounds[k] = min(bounds[k], bounds[k + 1] - 1)
    return bounds


def use_compile(spec, data: FederatedData, device: torch.device) -> bool:
    """Resolve `engine.compile` ('auto': `pflpipe.engine.compiled.pays_off`); note compiling."""
    setting = spec.engine.compile
    if setting == "auto":
        from pflpipe.engine.compiled import pays_off

        batches = -(-int(data.train.counts.max()) // spec.federation.batch_size)
        epochs = max(spec.federation.rounds * spec.federation.local_epochs,
                     spec.distillation.epochs)
        setting = pays_off(device, epochs * batches)
    if setting:
        note("compiled steps (engine.compile)")
    return setting


def optimizer(spec) -> OptimizerConfig:
    """The spec's local optimizer."""
    return OptimizerConfig.from_spec(spec.federation)


def plan_settings(spec) -> dict:
    """The `Plan` settings every federated stage takes from the spec as they are."""
    fed = spec.federation
    return {"optimizer": optimizer(spec), "eval_clients": fed.eval_clients,
            "server_optimizer": ServerOptimizerConfig.from_spec(fed.server_optimizer),
            "full_eval_every": fed.full_eval_every,
            "checkpoint_every": spec.engine.checkpoint_every}


#: The line a stage prints after each round; `pflpipe run` shows the latest one of each task.
PROGRESS = "pflpipe progress: round {round}/{rounds}"


def round_progress(rounds: int) -> Callable[[int, list[dict]], None]:
    """Return an `on_round` callback printing `PROGRESS` (mean validation accuracy too).

    Without a validation split (the engine scores it NaN) the line has no mean.
    """
    def on_round(round_idx: int, rows: list[dict]) -> None:
        accuracy = [r["accuracy"] for r in rows if r["split"] == "val"
                    and r.get("accuracy") not in (None, "") and not math.isnan(r["accuracy"])]
        mean = f", mean val accuracy {sum(accuracy) / len(accuracy):.4f}" if accuracy else ""
        print(PROGRESS.format(round=round_idx, rounds=rounds) + mean, flush=True)

    return on_round


#: Which of an earlier run's checkpoints a training stage resumes from (`pflpipe run` flags):
#: all of them (default: finished ones are reused as they are), only unfinished ones (finished
#: stages are recomputed: --no-cache) or none (--fresh).
RESUME = ("all", "unfinished", "none")


def checkpoint_store(spec, stage: str, key: dict) -> tuple[Store, str]:
    """The stable store a stage checkpoints into (so a rerun resumes), and its key.

    The key hashes everything the stage's result depends on: the same inputs find the same
    checkpoints, other inputs get a fresh directory.
    """
    key = {**key, "checkpoint_format": CHECKPOINT_FORMAT}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    root = open_store(spec.storage, default_root=spec.experiment.results_dir)
    return root.child(layout.stage_checkpoints(stage, digest)), digest


def use_checkpoints(store: Store, resume: str, rounds: int) -> str:
    """Keep or discard an earlier run's checkpoints as `resume` (one of `RESUME`) says; note it.

    Returns what the stage does: "fresh" (from round 0), "resumed" or "reused" (its finished
    checkpoints: nothing to train).
    """
    if resume not in RESUME:
        raise ValueError(f"resume must be one of {RESUME} (got {resume!r})")
    progress = checkpoint.progress_of(store)
    if progress is None:
        return "fresh"
    done = int(progress["rounds_completed"])
    finished = done >= rounds or bool(progress.get("stopped_early"))
    if resume == "none" or (resume == "unfinished" and finished):
        for name in store.list():
            store.delete(name)
        why = "--fresh" if resume == "none" else "--no-cache recomputes finished stages"
        note(f"recomputed: discarded the checkpoints of round {done}/{rounds} ({why})")
        return "fresh"
    if finished:
        note(f"reused finished checkpoints (round {done}/{rounds}): nothing trained")
        return "reused"
    note(f"resumed from round {done}/{rounds}")
    return "resumed"


def federate(spec, recipe: Recipe, make: Callable[..., Recipe], args: tuple,
             on_round: Callable[[int, list[dict]], None] | None = None) -> FederationResult:
    """Run `recipe`'s rounds here, or as `engine.workers` processes sharing the clients.

    The workers build their own recipe with ``make(*args)`` (a module-level function); the
    `Path`s among `args` are all the files it reads (a task in a store carries them:
    `distributed.write_task`).
    """
    workers = spec.engine.workers
    if workers == 1:
        return recipe.run(on_round)
    threads = max(1, torch.get_num_threads() // workers)
    note(f"{workers} workers, each training a shard of the clients with {threads} torch "
         f"thread{'s' if threads > 1 else ''}")
    return distributed.launch(workers, make, args, on_round, recipe.data.train.x.device, threads)


def client_test_accuracies(results: list[dict], selection: str, scope: str = "") -> list[float]:
    """Each client's test accuracy in the `results` rows of `selection` and `scope`.

    Scope "" is the personalized model, `GLOBAL_SCOPE` the algorithm's global model.
    """
    return [r["accuracy"] for r in results if r["selection"] == selection
            and r["split"] == "test" and r.get("scope", "") == scope]


def mean_test_accuracy(results: list[dict], selection: str, scope: str = "") -> float:
    """The mean over clients of `client_test_accuracies`."""
    values = client_test_accuracies(results, selection, scope)
    return sum(values) / len(values)


def engine_key(spec, s: Setup | None = None) -> dict:
    """The spec settings that change trained numbers (compiled steps round differently)."""
    key = {"model": spec.model.model_dump(mode="json"), "engine": spec.engine.mode,
           "device": str(device_of(spec.engine))}
    if s is not None and s.compiled:
        key["compile"] = True
    return key


def federation_rows(result: FederationResult, model: str, seed: int, data: FederatedData
                    ) -> list[dict]:
    """results.csv rows: each client's val and test scores at its best-val and last round.

    Without a validation split the engine's best-val round is the last one and only test rows
    are written. When the engine scored the algorithm's global model too (``global_*`` scores),
    each row has a twin of scope ``global`` holding the global model's scores at the same round;
    so for any other view of the personalized model the algorithm declares (``soft_*``: scope
    ``soft``) (docs/contracts.md).
    """
    scopes = [(prefix[:-1], prefix) for prefix in _prefixes(result.best, "test_accuracy")]
    rows = []
    for selection, scores in (("best_val", result.best), ("last_round", result.last)):
        for split in scored_splits(data):
            counts = data.split(split).counts.tolist()
            for client in range(data.n_clients):
                for scope, prefix in scopes:
                    rows.append({
                        "seed": seed, "client": data.client_id(client), "model": model,
                        "split": split,
                        "selection": selection, "round": int(scores["round"][client]),
                        "accuracy": float(scores[f"{prefix}{split}_accuracy"][client]),
                        "loss": float(scores[f"{prefix}{split}_loss"][client]),
                        "n_samples": counts[client], "scope": scope})
    return rows


def history_rows(rows: list[dict], model: str, seed: int) -> list[dict]:
    """history.csv rows from the engine's round × client × split records.

    An engine record with the global model's scores (``global_loss``, ``global_accuracy``)
    becomes two rows: the personalized model's and one of scope ``global`` (and so for every
    other scored view, e.g. ``soft_loss``: scope ``soft``).
    A ``train`` record's compute and diagnostics (`pflpipe.engine.records`) stay on its row.
    """
    out = []
    for row in rows:
        base = {"seed": seed, "model": model, "round": row["round"], "client": row["client"],
                "split": row["split"]}
        own = {k: v for k, v in row.items() if k in COMPUTE or k.startswith(DIAGNOSTIC_PREFIX)}
        out += [{**base, "scope": prefix[:-1], "loss": row[f"{prefix}loss"],
                 "accuracy": row.get(f"{prefix}accuracy", ""), **({} if prefix else own)}
                for prefix in _prefixes(row, "loss")]
    return out


def compute_totals(history: list[dict]) -> dict[int, dict[str, int]]:
    """Each client's compute summed over its history's rounds (`records.COMPUTE`).

    >>> compute_totals([{"client": 1, "steps": 2, "samples": 8, "bytes_sent": 4,
    ...                  "bytes_received": 4}, {"client": 1, "steps": 3, "samples": 9,
    ...                  "bytes_sent": 4, "bytes_received": 4}, {"client": 1, "loss": 0.5}])
    {1: {'steps': 5, 'samples': 17, 'bytes_sent': 8, 'bytes_received': 8}}
    """
    totals: dict[int, dict[str, int]] = {}
    for row in history:
        if row.get("steps") in (None, ""):
            continue
        total = totals.setdefault(int(row["client"]), dict.fromkeys(COMPUTE, 0))
        for name in COMPUTE:
            total[name] += int(row[name])
    return totals


def _prefixes(scores: dict, measure: str) -> list[str]:
    """The scopes' key prefixes of the scores of `measure` ("" first, then by name).

    A diagnostic column (``diag.router_loss``) is not a scope's.

    >>> _prefixes({"loss": 1, "global_loss": 2, "soft_loss": 3, "accuracy": 4,
    ...            "diag.router_loss": 5}, "loss")
    ['', 'global_', 'soft_']
    """
    return sorted(key[:-len(measure)] for key in scores if key.endswith(measure)
                  and (key == measure or key[-len(measure) - 1] == "_")
                  and not key.startswith(DIAGNOSTIC_PREFIX))


def write_results(out_dir: Path, results: list[dict], history: list[dict],
                  models: dict[str, dict] | None = None, summary: str = "") -> None:
    """Write a results directory: results.csv, history.csv, models/*.pt, summary.md.

    results.csv gets each client's compute over its whole run (`compute_totals` of `history`)
    when the history counts it; history.csv the compute and diagnostic columns its rows hold.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    totals = compute_totals(history)
    idle = dict.fromkeys(COMPUTE, 0) if totals else {}   # a client never sampled cost nothing
    results = [{**row, **totals.get(int(row["client"]), idle)} for row in results]
    counted = COMPUTE if totals else ()
    write_csv(out_dir / RESULTS_CSV, (*RESULT_FIELDS, *counted), results)
    columns = {key for row in history for key in row}
    write_csv(out_dir / HISTORY_CSV,
              (*HISTORY_FIELDS, *counted, *diagnostic_columns(columns)), history)
    for name, state_dict in (models or {}).items():
        path = layout.model_file(out_dir, name)
        path.parent.mkdir(exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, path)
    (out_dir / SUMMARY_MD).write_text(summary)


def write_shard(out_dir: Path, data: FederatedData, summary) -> None:
    """Record which clients a shard's results directory holds, and its summary (a dataclass)."""
    (Path(out_dir) / SHARD_JSON).write_text(json.dumps(
        {"clients": [data.first_client, data.n_clients],
         "of": data.whole_clients or data.n_clients,
         "summary": dataclasses.asdict(summary)}, indent=1))


def client_models(model: Tree | Group, first_client: int = 0) -> dict[str, dict]:
    """One state_dict per client from a stacked model [C, ...] (docs/contracts.md).

    The first member is client `first_client` (a shard's first).

    A tree's ``model`` group keeps its keys (the file loads into the network); any other group's
    keys are prefixed ``<group>/``.
    """
    if all(isinstance(value, torch.Tensor) for value in model.values()):
        model = {"model": model}
    flat = {(key if group == "model" else f"{group}/{key}"): value
            for group, tensors in model.items() for key, value in tensors.items()}
    n_clients = len(next(iter(flat.values())))
    return {client_file(first_client + c): {k: v[c] for k, v in flat.items()}
            for c in range(n_clients)}


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    """Write `rows` as a CSV with the columns `fields` (other keys of a row are ignored).

    Rows with a ``client`` are written client by client, each client's in their given order:
    so the merged tables of client shards equal the unsharded ones (`pflpipe.stages.shards`).
    """
    if "client" in fields:
        rows = sorted(rows, key=lambda row: int(row["client"]))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def load_round(directory: Path, round_idx: int, device: torch.device) -> Group:
    """The global state_dict of one round from a checkpoint directory."""
    return load_tensors(round_file(directory, round_idx), f"the state_dict of round {round_idx}",
                        map_location=device)


def mean_by_round(rows: list[dict], split: str, key: str, data: FederatedData) -> dict[int, float]:
    """Sample-weighted mean of `key` over clients, per round, for one split."""
    counts = data.split(split).counts.tolist()
    totals: dict[int, list[float]] = {}
    for row in rows:
        if row["split"] == split:
            acc = totals.setdefault(row["round"], [0.0, 0.0])
            acc[0] += row[key] * counts[row["client"]]
            acc[1] += counts[row["client"]]
    return {r: s / n for r, (s, n) in sorted(totals.items()) if n}


def log_clients(tracker: Tracker, stage: str, model: str, results: list[dict],
                history: list[dict], extra: Callable[[int], dict] | None = None,
                models: dict[str, dict] | None = None, *, seed: int | None = None,
                template: torch.nn.Module | None = None) -> None:
    """One MLflow child run per client, in the metric vocabulary of `pflpipe.tracking.vocabulary`.

    Each run (named ``client 3 · fedper``, `seed` appended when given) holds the per-round
    history (step = round), the final ``best.*`` and ``last.*`` values, `extra` params and, when
    given, the client's model (`models["client_0000"]`): an MLflow model loaded into `template`,
    or a state_dict artifact without one. `tracker` itself gets the mean over clients of every
    metric, so the algorithms' runs compare on one chart.
    """
    per_client_rounds, per_client_final = [], []
    # newest first in the runs table: created last to first, client 0 is listed first
    for client in sorted({int(row["client"]) for row in results}, reverse=True):
        tags = {"client_id": str(client), "algorithm": model, "stage": stage}
        rounds = vocabulary.round_rows(r for r in history if int(r["client"]) == client)
        final = vocabulary.final_metrics(r for r in results if int(r["client"]) == client)
        with tracker.child(vocabulary.run_name(model, client, seed), tags) as run:
            state, model_id = (models or {}).get(client_file(client)), None
            if state is not None and template is not None:
                # the network's own keys; other state groups are prefixed "<group>/"
                template.load_state_dict({k: v for k, v in state.items() if "/" not in k})
                model_id = run.log_model(template, f"{model}-client-{client}")
            elif state is not None:
                run.log_state_dict(state, f"{model}-client-{client}")
            run.log_batch(rounds, final, extra(client) if extra else None, model_id=model_id)
        per_client_rounds.append(rounds)
        per_client_final.append(final)
    (means,) = vocabulary.mean_over_clients(per_client_final) or [{}]
    tracker.log_batch(vocabulary.mean_over_clients(per_client_rounds, "round"),
                      {**means, **vocabulary.compute_totals(per_client_final)})
