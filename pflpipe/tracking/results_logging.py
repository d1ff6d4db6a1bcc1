"""Log a training stage's results directory into MLflow.

The training stages are cached and take no MLflow run id (a new id on every pipeline run would
change their inputs and so defeat the cache), so the pipeline's last task, `evaluate_fairness`,
logs each of them into the pipeline's parent run from every seed's collected directory
(`collect_results.track`; the per-seed `collect_results` tasks track nothing, so that they import
neither mlflow nor torch). Under the parent, each algorithm gets a run named
after it (``fedper``; ``fedper · seed 1`` with several seeds) holding its settings, the mean
over clients of the metrics of `pflpipe.tracking.vocabulary`, its clients' tables and models
(`pflpipe.tracking.client_tables.log_clients`); fedavg's best global model is an MLflow model.
"""

import io
from pathlib import Path

import torch

from pflpipe import layout
from pflpipe.spec.tuning import apply_tuning
from pflpipe.tracking import NULL_TRACKER, Tracker, vocabulary
from pflpipe.tracking.client_tables import log_clients
from pflpipe.training.csv_tables import read_csv

#: Stage of each model that is not trained by `personalize`.
STAGES = {"fedavg": "warm_start_fedavg", "local": "train_local",
          "persfl": "distill_grid_search", "persfl_gd": "distill_grid_search"}
#: PersFL's figures and tables that its run carries (results directory → artifact folder).
PERSFL_ARTIFACTS = {layout.LAMBDA_T_PNG: "figures", layout.TEACHER_ROUNDS_PNG: "figures",
                    layout.GRID_CSV: "distillation", layout.CHOSEN_CSV: "distillation"}


def track_model(tracker: Tracker, spec, seed: int, results_dir: Path, partition_dir: Path
                ) -> None:
    """Log one results directory: a run for its model (settings, means, clients' tables)."""
    if tracker is NULL_TRACKER:
        return
    results_dir = Path(results_dir)
    results, history = (read_csv(results_dir / name)
                        for name in (layout.RESULTS_CSV, layout.HISTORY_CSV))
    model = results[0]["model"]
    stage = STAGES.get(model, "personalize")
    several = len(spec.experiment.seeds) > 1
    tags = {"stage": stage, "algorithm": model, "seed": str(seed)}
    extra = None
    with tracker.child(vocabulary.run_name(model, seed=seed if several else None), tags) as run:
        run.log_params({"seed": seed, **_settings(spec, model, results_dir)})
        if stage == "distill_grid_search":
            chosen = {int(r["client"]): r for r in read_csv(results_dir / layout.CHOSEN_CSV)}
            extra = lambda client: _teacher_and_pair(chosen[client])  # noqa: E731
            for name, folder in PERSFL_ARTIFACTS.items():
                if (results_dir / name).is_file():
                    run.log_artifact(results_dir / name, folder)
        best = layout.model_file(results_dir, layout.GLOBAL_BEST_VAL)
        if model == "fedavg" and best.is_file():
            template = _template(spec, seed, partition_dir)
            template.load_state_dict(_load(best))
            run.log_model(template, "fedavg-global")
        models = ({path.stem: _load(path) for path in layout.client_model_files(results_dir)}
                  if spec.tracking.log_models else {})
        log_clients(run, results, history, extra, models or None)


def _settings(spec, model: str, results_dir: Path | None = None) -> dict:
    """What an algorithm's run records as params: the spec settings it ran with.

    A tuned entry ran with the setting the tune stage chose (kept in its `results_dir`).
    """
    if model == "fedavg":
        fed = spec.federation
        return {"rounds": fed.rounds, "local_epochs": fed.local_epochs, "lr": fed.lr,
                "batch_size": fed.batch_size, "optimizer": fed.optimizer,
                "client_fraction": fed.client_fraction}
    if STAGES.get(model) == "distill_grid_search":
        dist = spec.distillation
        return {"lambdas": list(dist.lambdas), "temperatures": list(dist.temperatures),
                "epochs": dist.epochs, "objective": dist.objective, "teacher": dist.teacher,
                "selection_split": dist.selection_split, "criterion": spec.teachers.criterion}
    entry = spec.local_params if model == "local" else spec.algorithm(model)
    if results_dir is not None and (Path(results_dir) / layout.TUNING_JSON).is_file():
        entry = apply_tuning(spec, model, results_dir).algorithm(model)
    return {"algorithm": entry.name, **{k: v for k, v in entry.model_dump(mode="json").items()
                                       if v is not None and k != "name"}}


def _teacher_and_pair(chosen: dict) -> dict:
    """A PersFL client's teacher round and chosen (λ, T), from its chosen.csv row."""
    return {"teacher_round": int(chosen["teacher_round"]), "lam": float(chosen["lam"]),
            "temperature": float(chosen["temperature"])}


def _template(spec, seed: int, partition_dir: Path) -> torch.nn.Module:
    """The spec's network, into which each client's weights are loaded before logging."""
    from pflpipe.data import read_manifest
    from pflpipe.models import build_model

    dataset = read_manifest(partition_dir)["dataset"]
    outputs = dataset["n_classes"] if dataset["task"] == "classification" else 1
    return build_model(spec.model, tuple(dataset["input_shape"]), outputs, seed)


def _load(path: Path) -> dict:
    return torch.load(io.BytesIO(path.read_bytes()), weights_only=True, map_location="cpu")
