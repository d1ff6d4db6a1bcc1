"""What the cached stages see of the spec.

`partition_data` and `warm_start_fedavg` are deterministic given a few spec sections and the seed,
so the pipeline caches them. KFP derives a task's cache key from its inputs (kfp.local hashes the
arguments, a cluster fingerprints the input values), so these two tasks receive only the sections
that decide their result: adding an algorithm, changing the evaluation or the tracking server
leaves their key, and so their cached outputs, unchanged. They take no run id either; a new MLflow
run on every pipeline run would defeat the cache.

A custom `cache_key` cannot do this: it is a constant of the compiled pipeline, the same for every
iteration of the seeds loop.
"""

from pflpipe.spec import Spec

#: Stages whose outputs are reused across runs; every other stage runs every time.
CACHED = ("partition_data", "warm_start_fedavg")

#: The spec sections each cached stage reads (pflpipe.stages and what they call).
SECTIONS = {
    "partition_data": ("dataset", "partition", "storage"),
    "warm_start_fedavg": ("dataset", "partition", "model", "federation", "engine", "storage"),
}


def scoped_spec_json(spec: Spec, stage: str) -> str:
    """Return the spec as `stage` needs it: its sections, every other one at its default.

    The experiment keeps only its name and output directory (checkpoints go under the results
    directory), so a different seed list or description does not invalidate the cache.
    """
    data = spec.model_dump(mode="json", by_alias=True)
    data["engine"]["parallel_tasks"] = None  # how many tasks run at once decides no result
    kept = {name: data[name] for name in SECTIONS[stage]}
    kept["experiment"] = {"name": spec.experiment.name, "output_dir": spec.experiment.output_dir}
    return Spec.model_validate(kept).model_dump_json(by_alias=True)
