"""Component `select_teachers`: each client's optimal teacher round (PersFL stage 1)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def select_teachers(spec_json: str, seed: int, tracking_uri: str, experiment: str,
                    parent_run_id: str, checkpoints: Input[Model], teachers: Output[Dataset],
                    summary: Output[Markdown]):
    """Pick each client's teacher round from the warm start's per-round validation scores."""
    from pathlib import Path

    from pflpipe.spec import Spec
    from pflpipe.stages import select_teachers as stage
    from pflpipe.tracking import child_run

    spec = Spec.model_validate_json(spec_json)
    with child_run(spec.tracking, tracking_uri, experiment, parent_run_id, "select_teachers",
                   {"seed": str(seed)}) as tracker:
        result = stage.run(spec, Path(checkpoints.path), Path(teachers.path), tracker=tracker)
    Path(summary.path).write_text(result.to_markdown())
