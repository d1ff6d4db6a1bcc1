"""Component `personalize`: one personalization algorithm of the spec (one task per entry)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def personalize(spec_json: str, seed: int, label: str, tracking_uri: str, experiment: str,
                parent_run_id: str, partition: Input[Dataset], checkpoints: Input[Model],
                results: Output[Model], summary: Output[Markdown], resume: str = "all"):
    """Run the personalization entry `label` from the warm start; write its results directory."""
    from pathlib import Path

    from pflpipe.spec import Spec
    from pflpipe.stages import personalize as stage
    from pflpipe.tracking import child_run

    spec = Spec.model_validate_json(spec_json)
    tags = {"stage": "personalize", "algorithm": label, "seed": str(seed)}
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id,
                   f"personalize/{label}", tags) as tracker:
        result = stage.run(spec, seed, label, Path(partition.path), Path(checkpoints.path),
                           Path(results.path), tracker=tracker, progress=True, resume=resume)
    Path(summary.path).write_text(result.to_markdown())
