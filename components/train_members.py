"""Component `train_members`: the spec's seeds as members of one federation, before the seeds loop.

Cached like the stages it trains: it takes their scoped specs (`pflpipe.pipelines.cache`) as one
JSON object, and tracks nothing. Its output holds each seed's directories; the seeds loop's tasks
read their own checkpoints from the spec's storage, where this task leaves them finished.
"""

from kfp import dsl
from kfp.dsl import Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def train_members(specs_json: str, members: Output[Model], summary: Output[Markdown],
                  resume: str = "all", whole: bool = False):
    """Train every seed of the grouped stages as members (resume: all, unfinished, none).

    `whole`: the seeds loop trains nothing; what cannot train as members trains here, seed by
    seed.
    """
    from pflpipe import events

    with events.stage("train_members"):
        import json
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import train_members as stage

        specs = {name: Spec.model_validate(data)
                 for name, data in json.loads(specs_json).items()}
        result = stage.run(specs, Path(members.path), resume=resume, progress=True,
                           whole=whole)
        Path(summary.path).write_text(result.to_markdown())
