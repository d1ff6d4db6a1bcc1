"""Component `distill_grid_search`: PersFL stage 2, every client × (λ, T) student at once."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def distill_grid_search(spec_json: str, seed: int, tracking_uri: str, experiment: str,
                        parent_run_id: str, partition: Input[Dataset],
                        checkpoints: Input[Model], teachers: Input[Dataset],
                        results: Output[Model], summary: Output[Markdown]):
    """Distil each client's teacher over the λ/T grid; write the results directory."""
    from pathlib import Path

    from pflpipe.spec import Spec
    from pflpipe.stages import distill_grid_search as stage
    from pflpipe.tracking import child_run

    spec = Spec.model_validate_json(spec_json)
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id,
                   "distill_grid_search", {"seed": str(seed)}) as tracker:
        result = stage.run(spec, seed, Path(partition.path), Path(checkpoints.path),
                           Path(teachers.path), Path(results.path), tracker=tracker)
    Path(summary.path).write_text(result.to_markdown())
