"""Component `select_teachers`: each client's optimal teacher round (PersFL stage 1).

Cached on the spec sections it reads (see `pflpipe.pipelines.cache`); tracks nothing: the PersFL
client runs that `collect_results` logs carry each teacher round.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def select_teachers(spec_json: str, seed: int, checkpoints: Input[Model],
                    teachers: Output[Dataset], summary: Output[Markdown]):
    """Pick each client's teacher round from the warm start's per-round validation scores."""
    from pflpipe import events

    with events.stage("select_teachers", named=summary, seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import select_teachers as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, Path(checkpoints.path), Path(teachers.path))
        Path(summary.path).write_text(result.to_markdown())
