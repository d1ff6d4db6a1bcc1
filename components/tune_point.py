"""Component `tune_point`: one grid point of a tuned entry on one tuning seed.

Cached like `personalize` (its spec holds the sections it reads and its entry at the point).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def tune_point(spec_json: str, seed: int, label: str, values: str, partition: Input[Dataset],
               checkpoints: Input[Model], results: Output[Model], summary: Output[Markdown],
               resume: str = "all"):
    """Train the entry `label` at the grid point `values` (JSON); score it on validation."""
    from pflpipe import events

    with events.stage("tune_point", named=summary, seed=seed, label=label, point=values):
        import json
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import tune_point as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, label, json.loads(values), Path(partition.path),
                           Path(checkpoints.path), Path(results.path), progress=True, resume=resume)
        Path(summary.path).write_text(result.to_markdown())
