"""What each cached stage sees of the spec.

Every training stage is deterministic given its inputs (the spec, the seed and its input
artifacts), so the pipeline caches each of them. KFP derives a task's cache key from its inputs
(kfp.local hashes the arguments, input artifacts by URI; a cluster fingerprints the input values),
so each task receives only the spec settings it reads, every other one at its default: adding an
algorithm, changing the evaluation or the tracking server leaves the keys of the stages that
already ran, and so their cached outputs, unchanged. A `personalize` task sees only its own entry.
They take no MLflow run id either (a new one on every pipeline run would defeat the cache):
`collect_results`, which runs every time, logs their results into the run's parent.

A custom `cache_key` cannot do this: it is a constant of the compiled pipeline, the same for every
iteration of the seeds loop.
"""

import json

from pflpipe.spec import Spec

#: Stages whose outputs are reused across runs; the two that track run every time.
CACHED = ("partition_data", "warm_start_fedavg", "train_local", "personalize", "select_teachers",
          "distill_grid_search", "tune_point", "tune", "train_members")
#: Stages whose tasks run one personalization entry, and see only it.
PER_ENTRY = ("personalize", "tune_point")

#: Stages that run one task per client shard under `engine.shards` (pipelines.graph), as do the
#: personalize entries whose clients train alone (`is_sharded`).
SHARDED = ("train_local", "distill_grid_search")
_TRAINING = ("model", "federation", "engine", "storage")
#: The spec settings each cached stage reads (pflpipe.stages and what they call), as dotted
#: paths; dataset and partition are always kept (a spec needs them), the experiment keeps only
#: its name and output directory (checkpoints go under the results directory).
READS = {
    "partition_data": ("storage",),
    "warm_start_fedavg": _TRAINING,
    "train_local": _TRAINING,          # and the local baseline's entry, if the spec has one
    "personalize": _TRAINING,          # and its own entry
    "select_teachers": ("teachers", "distillation.teacher"),
    "distill_grid_search": ("model", "federation", "engine", "teachers", "distillation"),
    "tune_point": _TRAINING,           # and its own entry at the grid point
    "tune": ("tuning", "evaluation.selection"),  # and the tuned entries
}


def is_sharded(spec: Spec, stage: str, label: str | None = None) -> bool:
    """Whether `stage` (a `personalize` task: its entry `label`) runs as client shards.

    So it does when `engine.shards` > 1; its shards then count in its cache key.
    """
    if spec.engine.shards == 1:
        return False
    if stage == "personalize":
        return spec.algorithm(label).clients_train_alone
    return stage in SHARDED


def scoped_spec_json(spec: Spec, stage: str, label: str | None = None) -> str:
    """Return the spec as `stage` needs it: what it reads, every other setting at its default.

    `label` names the personalization entry of a `personalize` task.
    """
    data = spec.model_dump(mode="json", by_alias=True)
    data["engine"]["parallel_tasks"] = None  # how many tasks run at once decides no result
    if not is_sharded(spec, stage, label):
        data["engine"]["shards"] = 1
    kept = {"experiment": {"name": spec.experiment.name, "output_dir": spec.experiment.output_dir},
            "dataset": data["dataset"], "partition": data["partition"], "personalization": []}
    for path in READS[stage]:
        section, _, field = path.partition(".")
        if field:
            kept.setdefault(section, {})[field] = data[section][field]
        else:
            kept[section] = data[section]
    kept["personalization"] = [
        entry for entry, parsed in zip(data["personalization"], spec.personalization, strict=True)
        if (stage in PER_ENTRY and parsed.display_name == label)
        or (stage == "train_local" and parsed.name == "local")
        or (stage == "tune" and spec.tuning.find(parsed.display_name))]
    if stage == "tune":  # any reported seeds disjoint from the tuning seeds: the first such
        kept["experiment"]["seeds"] = [min(set(range(len(spec.tuning.seeds) + 1))
                                           - set(spec.tuning.seeds))]
    return task_spec_json(Spec.model_validate(kept))


def task_spec_json(spec: Spec) -> str:
    """The spec as a task receives it, without `engine.seeds_as_members`.

    That switch shapes the graph only (a train_members task before the seeds loop); left out,
    each task's cache key is the same with it on or off, and as before it existed.
    """
    return spec.model_dump_json(by_alias=True, exclude={"engine": {"seeds_as_members"}})


def members_specs_json(spec: Spec) -> str:
    """The `train_members` task's specs: each task it may group, scoped as that task's own.

    Keys are `pflpipe.stages.train_members.task_names` but tuned entries, "partition_data",
    and for PersFL "select_teachers" and "distill_grid_search"; the seeds are the experiment's
    (a scoped spec keeps only the default).
    """
    from pflpipe.stages.train_members import task_names

    def scoped(stage: str, label: str | None = None) -> dict:
        data = json.loads(scoped_spec_json(spec, stage, label))
        data["experiment"]["seeds"] = list(spec.experiment.seeds)
        return data

    specs = {"partition_data": scoped("partition_data")}
    for name in task_names(spec):
        label = name.removeprefix("personalize[").removesuffix("]")
        if name in READS:
            specs[name] = scoped(name)
        elif not (spec.tuning and spec.tuning.find(label)):   # tuned: trains per seed
            specs[name] = scoped("personalize", label)
    if spec.has_persfl:   # its teachers and grid, after the warm start
        specs.update({stage: scoped(stage) for stage in ("select_teachers", "distill_grid_search")})
    return json.dumps(specs)


def tuning_members_specs_json(spec: Spec) -> str:
    """The tuning seeds' `train_members` task's specs: their partition, warm start, grid points.

    Each scoped as the tuning loop's own task (a grid point's: `tuning_items`), with the tuning
    seeds; keys are "partition_data", "warm_start_fedavg" and each point's
    `pflpipe.stages.train_members.point_name`.
    """
    from pflpipe.stages.train_members import point_name

    def on_tuning_seeds(text: str) -> dict:
        data = json.loads(text)
        data["experiment"]["seeds"] = list(spec.tuning.seeds)
        return data

    specs = {stage: on_tuning_seeds(scoped_spec_json(spec, stage))
             for stage in ("partition_data", "warm_start_fedavg")}
    for item in tuning_items(spec):
        specs[point_name(item["label"], json.loads(item["values"]))] = on_tuning_seeds(
            item["spec_json"])
    return json.dumps(specs)


def tuning_items(spec: Spec) -> list[dict[str, str]]:
    """The grid-point loop's items: an entry's label, its point's scoped spec, the point's values.

    Each grid point's spec holds the entry at the point's values and the budget's rounds
    (`pflpipe.spec.tuning.point_spec`); the values travel as JSON.
    """
    from pflpipe.spec.tuning import point_spec

    return [{"label": tuned.entry, "values": json.dumps(values),
             "spec_json": scoped_spec_json(point_spec(spec, tuned.entry, values), "tune_point",
                                           tuned.entry)}
            for tuned in spec.tuning.entries for values in tuned.points()]
