"""Component `tune`: choose each tuned entry's setting on the tuning seeds' validation splits.

It runs once per tuning seed (over that seed's grid points) and once over those (every seed).
"""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def tune(spec_json: str, scores: Input[list[Artifact]], chosen: Output[Artifact],
         summary: Output[Markdown]):
    """Gather the grid points' scores under `scores`; write the choice per entry."""
    from pathlib import Path

    from pflpipe import events
    from pflpipe.stages import tune as stage

    dirs = [Path(s.path) for s in scores]
    with events.stage("tune", seed=stage.seed_of(dirs)):   # a seed's tune, or all seeds'
        from pflpipe.spec import Spec

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, dirs, Path(chosen.path))
        Path(summary.path).write_text(result.to_markdown())
