"""The root of the spec and the checks that span sections."""

import hashlib
import json
from typing import Any

from pydantic import Field, field_validator, model_serializer, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from pflpipe.spec.algorithms import PERSONALIZE, LocalParams, PersFLParams, PersonalizationEntry
from pflpipe.spec.dataset import (
    GROUPED,
    OWN_SPLITS,
    Dataset,
    n_classes_of,
    n_samples_of,
    task_of,
)
from pflpipe.spec.model import Model
from pflpipe.spec.partition import Partition
from pflpipe.spec.sections import (
    Distillation,
    Engine,
    Evaluation,
    Experiment,
    FederationSettings,
    LocalStorage,
    Resources,
    Storage,
    Teachers,
    Tracking,
)
from pflpipe.spec.strict_section import Section
from pflpipe.spec.sweep import checked_sweep, sweep_errors
from pflpipe.spec.tuning import Tuning, tuning_errors, with_values

IMAGE_SHAPES = {
    "mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "emnist": (1, 28, 28),
    "cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "digits": (1, 8, 8),
}


#: The sections a run's partition and warm-start checkpoints are made from.
WARM_START_SECTIONS = ("dataset", "partition", "model", "federation")


class Spec(Section):
    """A whole pflpipe experiment: data, federation, personalization, evaluation, platform."""

    experiment: Experiment
    dataset: Dataset
    partition: Partition
    model: Model = Field(
        default_factory=lambda: {"architecture": "mlp"},
        description="The network; the thesis's DNN (one hidden layer of 100) when omitted.",
    )
    federation: FederationSettings = Field(default_factory=FederationSettings)
    personalization: list[PersonalizationEntry] = Field(
        default_factory=lambda data: [] if _is_regression(data) else [{"name": "persfl"}],
        description="Algorithms compared against FedAvg and the local baseline; persfl when "
        "omitted (none for a regression dataset, whose targets persfl cannot distill).",
    )
    teachers: Teachers = Field(default_factory=Teachers)
    distillation: Distillation = Field(default_factory=Distillation)
    evaluation: Evaluation = Field(default_factory=Evaluation)
    tracking: Tracking = Field(default_factory=Tracking)
    storage: Storage = Field(default_factory=lambda: LocalStorage(kind="local"))
    resources: Resources = Field(default_factory=Resources)
    engine: Engine = Field(default_factory=Engine)
    tuning: Tuning | None = Field(
        None, description="Grids of personalization entries, each chosen on the validation "
        "splits of tuning seeds that are never reported (docs/tuning.md); none when omitted.",
    )
    sweep: dict[str, Any] | None = Field(
        None, description="Settings to vary, as dotted paths (spelled as for --set) mapped to "
        "lists of values; several keys give every combination, each a point run as the spec "
        "with those values (docs/sweeps.md); none when omitted.",
    )

    _sweep_shape = field_validator("sweep", mode="before")(
        classmethod(lambda cls, value: checked_sweep(value)))

    @model_validator(mode="after")
    def _consistent(self):
        errors = [*_data_errors(self), *_model_errors(self), *_algorithm_errors(self),
                  *tuning_errors(self), *_grid_point_errors(self), *sweep_errors(self)]
        if errors:
            raise ValidationError.from_exception_data(
                "Spec",
                [InitErrorDetails(type=PydanticCustomError("spec", msg), loc=loc, input=value)
                 for loc, msg, value in errors],
            )
        return self

    @model_serializer(mode="wrap")
    def _without_absent_sections(self, handler):
        # A spec without tuning dumps as before the section existed: the same JSON, content
        # hash and stage cache keys.
        # So does a spec without a sweep (a sweep's points have none).
        data = handler(self)
        for optional in ("tuning", "sweep"):
            if isinstance(data, dict) and data.get(optional, ...) is None:
                del data[optional]
        return data

    # ---- conveniences read by every stage -------------------------------------------------
    def algorithm(self, label: str):
        """Return the personalization entry whose display name is `label`.

        The local baseline's label gives its settings even when the spec does not list it.
        """
        for entry in self.personalization:
            if entry.display_name == label:
                return entry
        if label == self.local_params.display_name:
            return self.local_params
        names = [entry.display_name for entry in self.personalization]
        raise KeyError(f"no personalization entry named {label!r} (have {names})")

    @property
    def has_persfl(self) -> bool:
        """Whether the PersFL stages run."""
        return any(isinstance(entry, PersFLParams) for entry in self.personalization)

    @property
    def local_params(self) -> LocalParams:
        """Settings of the local-only baseline (an explicit `local` entry, else defaults)."""
        for entry in self.personalization:
            if isinstance(entry, LocalParams):
                return entry
        return LocalParams(name="local")

    @property
    def runs_local(self) -> bool:
        """Whether the local baseline runs: it is the L of QoI, so whenever there is a P."""
        return bool(self.personalization)

    def warm_start_hash(self) -> str:
        """Return a short sha256 of what made a run's partition and warm-start checkpoints.

        The `WARM_START_SECTIONS` (defaults included): specs that differ elsewhere
        (personalization, distillation, evaluation, the platform) start from the same ones.
        """
        payload = json.dumps(self.model_dump(mode="json", by_alias=True,
                                             include=set(WARM_START_SECTIONS)), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def content_hash(self) -> str:
        """Return a short sha256 of the validated spec (defaults included)."""
        payload = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _is_regression(data: dict) -> bool:
    return "dataset" in data and task_of(data["dataset"]) == "regression"


def _data_errors(spec: Spec):
    dataset, partition = spec.dataset, spec.partition
    n_classes = n_classes_of(dataset)
    if partition.strategy == "natural" and dataset.name not in (*GROUPED, "arrays"):
        yield (("partition", "strategy"),
               f"'natural' needs a dataset with client groups (synthetic, gaussian or arrays with "
               f"a 'client' array); {dataset.name!r} has none. Choose iid, ds1..ds4, shards, "
               "label_skew or concept_drift", partition.strategy)
    if dataset.name == "gaussian" and partition.strategy not in ("natural", "predefined"):
        yield (("partition", "strategy"), "the gaussian dataset is generated per client; use "
               "strategy 'natural'", partition.strategy)
    if partition.strategy == "predefined":
        yield from _predefined_errors(dataset, partition)
    fractions = getattr(partition, "fractions", None)
    if fractions is not None and not fractions.has_validation and spec.federation.early_stop:
        yield (("federation", "early_stop"), "stops on the validation loss, but "
               "partition.fractions.val is 0 (no validation split); remove early_stop or give "
               "val a fraction", None)
    if partition.n_clients is not None and spec.engine.shards > partition.n_clients:
        yield (("engine", "shards"), f"must be at most the {partition.n_clients} clients (one "
               "client or more per shard)", spec.engine.shards)
    per_client = {"ds1": "classes_per_client", "ds3": "classes_per_client",
                  "label_skew": "labels_per_client"}.get(partition.strategy)
    if per_client and n_classes is not None and getattr(partition, per_client) > n_classes:
        yield (("partition", per_client),
               f"must be at most the {n_classes} classes of {dataset.name!r}",
               getattr(partition, per_client))
    if partition.strategy == "ds4" and n_classes is not None and n_classes < 10:
        yield (("partition", "strategy"), f"ds4 needs 10 classes or more; {dataset.name!r} has "
               f"{n_classes}", partition.strategy)
    if partition.strategy == "concept_drift":
        if partition.groups is None and dataset.name != "cifar100":
            yield (("partition", "groups"), "is required unless the dataset is cifar100 (whose 20 "
                   "coarse groups are the default)", None)
        elif partition.groups and n_classes and n_classes % partition.groups:
            yield (("partition", "groups"), f"must divide the {n_classes} classes of "
                   f"{dataset.name!r}", partition.groups)
    if getattr(partition, "shared_cuts", False) and n_classes is not None:
        held = partition.n_clients * partition.labels_per_client
        if held % n_classes:
            yield (("partition", "shared_cuts"), f"needs every label held by the same number of "
                   f"clients, but {partition.n_clients} clients × {partition.labels_per_client} "
                   f"labels = {held} is not a multiple of the {n_classes} classes; change "
                   "n_clients or labels_per_client, or set shared_cuts: false", True)
    yield from _capacity_errors(spec)


def _predefined_errors(dataset, partition):
    if partition.path is None and dataset.name not in OWN_SPLITS:
        yield (("partition", "path"), f"is required: {dataset.name!r} has no per-client splits "
               "of its own (only client_files datasets and arrays files with client and split "
               "arrays do); give an index file (.npz or .json)", None)
    if dataset.name in ("synthetic", "gaussian") and partition.n_clients is None:
        yield (("partition", "n_clients"), f"is required: the {dataset.name} dataset is "
               "generated per client", None)


def _capacity_errors(spec: Spec):
    """Reject a named dataset too small for n_clients × min_samples, before any data loads."""
    dataset, partition = spec.dataset, spec.partition
    if partition.strategy == "predefined":
        return
    available = n_samples_of(dataset)
    needed = partition.n_clients * partition.min_samples
    if available is None or needed <= available:
        return
    most_clients = available // partition.min_samples
    per_client = available // partition.n_clients
    lower = f", or min_samples of at most {per_client}" if per_client >= 3 else ""
    yield (("partition", "min_samples"),
           f"{partition.n_clients:,} clients × {partition.min_samples} samples = {needed:,} "
           f"exceeds the {available:,} samples of {dataset.name!r} by {needed - available:,}; use "
           f"at most {most_clients:,} clients{lower}", partition.min_samples)


def _model_errors(spec: Spec):
    shape = IMAGE_SHAPES.get(spec.dataset.name)
    arch = spec.model.architecture
    if arch == "cnn_cifar" and shape is not None and shape != (3, 32, 32):
        yield (("model", "architecture"), f"cnn_cifar needs 3×32×32 images; {spec.dataset.name!r}"
               f" has {'×'.join(map(str, shape))}. Use mlp or fedavg_cnn", arch)
    if arch == "fedavg_cnn" and shape is not None and shape[1] < 28:
        yield (("model", "architecture"), f"fedavg_cnn needs images of 28×28 or more; "
               f"{spec.dataset.name!r} has {'×'.join(map(str, shape))}. Use mlp", arch)
    if arch in ("cnn_cifar", "fedavg_cnn", "cnn6") and spec.dataset.name in ("synthetic",
                                                                              "gaussian"):
        yield (("model", "architecture"), f"{arch} needs images; {spec.dataset.name!r} gives "
               "feature vectors. Use mlp or logistic", arch)


def _algorithm_errors(spec: Spec):
    # Results of the stages other than `personalize`: the warm start, the local baseline (its
    # entry's label, "local" by default) and PersFL (distillation.model_name).
    stage_models = {"fedavg": "FedAvg warm start (the global baseline)",
                    spec.local_params.display_name: "local-only baseline"}
    if spec.has_persfl:
        stage_models[spec.distillation.model_name] = "PersFL distillation stage"
    seen: dict[str, int] = {}
    for index, entry in enumerate(spec.personalization):
        name = entry.display_name
        if isinstance(entry, PersFLParams) and entry.label not in (None, entry.name):
            yield (("personalization", index, "label"), f"PersFL's results are named after "
                   f"distillation.objective ({spec.distillation.model_name!r}); remove the label",
                   entry.label)
        elif name in seen:
            yield (("personalization", index, "label"),
                   f"duplicates entry {seen[name]} ({name!r}); give one of them a distinct label",
                   entry.label)
        elif entry.stage == "personalize" and name in stage_models:
            yield (("personalization", index, "label" if entry.label else "name"),
                   f"{name!r} names the results of the {stage_models[name]}; choose another "
                   "label", name)
        seen.setdefault(name, index)
    if spec.has_persfl and task_of(spec.dataset) == "regression":
        index = next(i for i, e in enumerate(spec.personalization) if e.name == "persfl")
        yield (("personalization", index, "name"), f"persfl distills class probabilities, but "
               f"{spec.dataset.name!r} is a regression; choose among {', '.join(PERSONALIZE)}",
               "persfl")
    for index, entry in enumerate(spec.personalization):
        warm = getattr(entry, "warm_start", None)
        if isinstance(warm, int) and not isinstance(warm, bool) and warm > spec.federation.rounds:
            yield (("personalization", index, "warm_start"), f"round {warm} of the FedAvg warm "
                   f"start does not exist: it runs federation.rounds = {spec.federation.rounds} "
                   f"rounds (checkpoints 0..{spec.federation.rounds}); choose a round in that "
                   "range, 'final' or 'none'", warm)
    if sum(isinstance(e, PersFLParams) for e in spec.personalization) > 1:
        yield (("personalization",), "lists persfl more than once; PersFL is configured by the "
               "teachers and distillation sections", None)
    yield from _baseline_errors(spec, [*stage_models, *(
        e.display_name for e in spec.personalization if e.stage == "personalize")])


def _grid_point_errors(spec: Spec):
    """Each tuning grid value checked as the spec checks its entry's own field.

    A value valid for the field alone can still clash with the rest of the spec (a warm-start
    round beyond federation.rounds); the error names the grid value, e.g.
    ``tuning.entries[0].grid.warm_start[1]``.
    """
    from pydantic import ValidationError as Invalid

    indices = {e.display_name: i for i, e in enumerate(spec.personalization)}
    for t, tuned in enumerate(spec.tuning.entries if spec.tuning else ()):
        index = indices.get(tuned.entry)
        if index is None:
            continue   # tuning_errors names the entry
        entry = spec.personalization[index]
        for key, values in tuned.grid.items():
            for position, value in enumerate(values):
                try:
                    point = with_values(entry, {key: value})
                except Invalid:
                    continue   # tuning_errors names the value
                copy = spec.model_copy(update={"personalization": [
                    point if i == index else e for i, e in enumerate(spec.personalization)]})
                for loc, message, _ in _algorithm_errors(copy):
                    if loc == ("personalization", index, key):
                        yield (("tuning", "entries", t, "grid", key, position), message, value)


def _baseline_errors(spec: Spec, produced: list[str]):
    """Each baseline must name a model the spec trains (local only when something is compared)."""
    if not spec.runs_local:
        produced = ["fedavg"]
    baselines = spec.evaluation.baselines
    for key, value in (("local", baselines.local), ("global", baselines.global_)):
        if value not in produced and (key == "global" or spec.runs_local):
            yield (("evaluation", "baselines", key), f"no stage of this spec produces a model "
                   f"named {value!r}; choose one of {', '.join(produced)}", value)


