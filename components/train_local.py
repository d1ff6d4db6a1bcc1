"""Component `train_local`: the local-only baseline, every client training alone."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def train_local(spec_json: str, seed: int, tracking_uri: str, experiment: str,
                parent_run_id: str, partition: Input[Dataset], results: Output[Model],
                summary: Output[Markdown], resume: str = "all"):
    """Train the local baseline; write its results directory (model `local`).

    The cached partition_data task sees no run id, so this first tracked task of a seed tags
    the parent run with the partition's content hash (``partition_hash.seed-N``).
    """
    from pathlib import Path

    from pflpipe.data import read_manifest
    from pflpipe.spec import Spec
    from pflpipe.stages import train_local as stage
    from pflpipe.tracking import child_run, parent_tracker

    spec = Spec.model_validate_json(spec_json)
    partition_hash = read_manifest(partition.path)["content_hash"]
    parent_tracker(spec.tracking, tracking_uri, parent_run_id, experiment).set_tags(
        {f"partition_hash.seed-{seed}": partition_hash})
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id, "train_local",
                   {"seed": str(seed), "partition_hash": partition_hash}) as tracker:
        result = stage.run(spec, seed, Path(partition.path), Path(results.path),
                           tracker=tracker, progress=True, resume=resume)
    Path(summary.path).write_text(result.to_markdown())
