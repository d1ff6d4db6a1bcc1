"""Log a training stage's results directory into MLflow.

The training stages are cached and take no MLflow run id (a new id on every pipeline run would
change their inputs and so defeat the cache), so in a pipeline `evaluate_fairness` logs each of
them into the parent run from its collected results directory. Under the parent, each algorithm
gets a run named after it (``fedper``; ``fedper · seed 1`` with several seeds), and under that a
run per client (``fedper · client 3``) holding the metrics of `pflpipe.tracking.vocabulary`, its
settings and its model.

The models are pickled with torch (MLflow's pytorch format); `SavedModels` has a forked process
do that, so that the tracking process imports no torch (docs/performance.md, start-up).
"""

import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from pflpipe import layout
from pflpipe.stages import tune
from pflpipe.stages.beside import Beside
from pflpipe.stages.progress import log_clients
from pflpipe.stages.tables import read_csv
from pflpipe.tracking import NULL_TRACKER, Tracker, vocabulary

#: Stage of each model that is not trained by `personalize`.
STAGES = {"fedavg": "warm_start_fedavg", "local": "train_local",
          "persfl": "distill_grid_search", "persfl_gd": "distill_grid_search"}
#: PersFL's figures and tables that its run carries (results directory → artifact folder).
PERSFL_ARTIFACTS = {layout.LAMBDA_T_PNG: "figures", layout.TEACHER_ROUNDS_PNG: "figures",
                    layout.GRID_CSV: "distillation", layout.CHOSEN_CSV: "distillation"}


def track_model(tracker: Tracker, spec, seed: int, results_dir: Path, partition_dir: Path,
                saved: "SavedModels | None" = None) -> None:
    """Log one results directory: a run for its model (settings, means), a run per client.

    With `saved`, the models are the ones it saved (in another process), not loaded here.
    """
    if tracker is NULL_TRACKER:
        return
    results_dir = Path(results_dir)
    results, history = (read_csv(results_dir / name)
                        for name in (layout.RESULTS_CSV, layout.HISTORY_CSV))
    model = results[0]["model"]
    stage = STAGES.get(model, "personalize")
    several = len(spec.experiment.seeds) > 1
    tags = {"stage": stage, "algorithm": model, "seed": str(seed)}
    template = None if saved else _template(spec, seed, partition_dir)
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
        if model == "fedavg" and best.is_file() and saved:
            run.log_saved_model(saved(results_dir, "fedavg-global"), "fedavg-global")
        elif model == "fedavg" and best.is_file():
            template.load_state_dict(_load(best))
            run.log_model(template, "fedavg-global")
        models = {path.stem: path if saved else _load(path)
                  for path in layout.client_model_files(results_dir)}
        log_clients(run, stage, model, results, history, extra, models or None,
                    seed=seed if several else None, template=template,
                    saved=(lambda name: saved(results_dir, name)) if saved else None)


class SavedModels:
    """Every model of `collected_dirs` (`collect_results` folders) saved by a forked process.

    ``saved(results_dir, name)`` waits until the model `name` (``fedper-client-3``,
    ``fedavg-global``) of `results_dir` is saved, and returns its folder, for
    `Tracker.log_saved_model`. The process imports torch and pickles the models in the order
    `track_model` logs them, while this one opens MLflow and tracks. Use as a context manager
    (the folders are removed on exit); a failure of the process is raised by the call waiting.
    """

    def __init__(self, spec, collected_dirs: list[Path]):
        import multiprocessing

        self._folder = tempfile.TemporaryDirectory(prefix="pflpipe-models-")
        self._ready: dict[tuple[str, str], Path] = {}
        args = (spec, list(map(Path, collected_dirs)), Path(self._folder.name))
        self._names, names = multiprocessing.Pipe(duplex=False)
        if "fork" not in multiprocessing.get_all_start_methods():   # save them all here
            self._ready = save_models(*args, lambda _: None)
        self._saving = Beside(save_models, args=(*args, names.send),
                              name="evaluate_fairness models") if not self._ready else None
        names.close()   # the child's end: its exit closes the pipe

    def __call__(self, results_dir: Path, name: str) -> Path:
        """The folder of model `name` of `results_dir`, once the process has saved it."""
        key = (str(Path(results_dir)), name)
        while key not in self._ready:
            try:
                done, folder = self._names.recv()
            except EOFError:
                if self._saving is not None:
                    self._saving.result()   # raises the child's failure
                raise RuntimeError(f"no model {name} of {results_dir} was saved") from None
            self._ready[done] = folder
        return self._ready[key]

    def __enter__(self) -> "SavedModels":
        return self

    def __exit__(self, *exc) -> None:
        self._names.close()   # first: a child blocked sending a name stops (broken pipe)
        if self._saving is not None:
            self._saving.close()
        self._folder.cleanup()


def save_models(spec, collected_dirs: list[Path], folder: Path,
                announce: Callable[[tuple], None]) -> dict:
    """Save every model `track_model` logs; `announce` each ((results_dir, name), its folder).

    Returns the same pairs as a dict.
    """
    from pflpipe.tracking import save_model

    saved = {}
    for directory in collected_dirs:
        collected = json.loads((directory / layout.COLLECTED_JSON).read_text())
        for model in reversed(collected["models"]):   # `collect_results.track`'s order
            results_dir = directory / model
            template = _template(spec, collected["seed"], directory / layout.PARTITION)
            files = {f"{model}-client-{int(path.stem.rsplit('_', 1)[1])}": path
                     for path in reversed(layout.client_model_files(results_dir))}
            best = layout.model_file(results_dir, layout.GLOBAL_BEST_VAL)
            if model == "fedavg" and best.is_file():
                files = {"fedavg-global": best, **files}
            for name, file in files.items():   # one at a time: the first is logged soonest
                template.load_state_dict({k: v for k, v in _load(file).items() if "/" not in k})
                saved[(str(results_dir), name)] = path = folder / str(len(saved))
                save_model(template, path)
                announce(((str(results_dir), name), path))
    return saved


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
    if results_dir is not None and (Path(results_dir) / tune.TUNING_JSON).is_file():
        entry = tune.apply(spec, model, results_dir).algorithm(model)
    return {"algorithm": entry.name, **{k: v for k, v in entry.model_dump(mode="json").items()
                                       if v is not None and k != "name"}}


def _teacher_and_pair(chosen: dict) -> dict:
    """A PersFL client's teacher round and chosen (λ, T), from its chosen.csv row."""
    return {"teacher_round": int(chosen["teacher_round"]), "lam": float(chosen["lam"]),
            "temperature": float(chosen["temperature"])}


def _template(spec, seed: int, partition_dir: Path):
    """The spec's network, into which each client's weights are loaded before logging."""
    from pflpipe.data import read_manifest
    from pflpipe.models import build_model

    dataset = read_manifest(partition_dir)["dataset"]
    outputs = dataset["n_classes"] if dataset["task"] == "classification" else 1
    return build_model(spec.model, tuple(dataset["input_shape"]), outputs, seed)


def _load(path: Path) -> dict:
    import torch

    return torch.load(io.BytesIO(path.read_bytes()), weights_only=True, map_location="cpu")
