"""Component `collect_members`: one seed's results from train_members' output (not cached).

The seeds loop's one task when train_members trains every task of the seeds
(`pflpipe.stages.train_members.whole`); its output is collect_results'. Tracks nothing.
"""

from kfp import dsl
from kfp.dsl import Input, Markdown, Metrics, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def collect_members(spec_json: str, seed: int, members: Input[Model], results: Output[Model],
                    metrics: Output[Metrics], summary: Output[Markdown]):
    """Gather the seed's results directories of `members` under `results/<model>/`."""
    from pflpipe import events

    with events.stage("collect_members", named=summary, seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import collect_members as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, Path(members.path), Path(results.path))
        metrics.metadata.update(result.metrics())
        Path(summary.path).write_text(result.to_markdown())
