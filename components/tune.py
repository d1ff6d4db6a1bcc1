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
    from pflpipe import events

    with events.stage("tune"):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import tune as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, [Path(s.path) for s in scores], Path(chosen.path))
        Path(summary.path).write_text(result.to_markdown())
