"""Component `personalize`: one personalization algorithm of the spec (one task per entry).

Deterministic, so the pipeline caches it: its spec holds only the sections it reads and its own
entry (see `pflpipe.pipelines.cache`), so adding an algorithm leaves it cached. It tracks
nothing; `collect_results` logs its results.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def personalize(spec_json: str, seed: int, label: str, partition: Input[Dataset],
                checkpoints: Input[Model], results: Output[Model], summary: Output[Markdown],
                resume: str = "all", shard: str = "", tuning: Input[Artifact] = None):
    """Run the personalization entry `label` from the warm start; write its results directory.

    `shard` "k": only the k-th client shard of `engine.shards` (an entry whose clients train
    alone; `collect_results` merges the shards); "": every client. `tuning`: the tune
    stage's choice, for a tuned entry.
    """
    from pflpipe import events

    with events.stage("personalize", named=summary, seed=seed, label=label, shard=shard):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import personalize as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, label, Path(partition.path), Path(checkpoints.path),
                           Path(results.path), progress=True, resume=resume,
                           shard=int(shard) if shard else None,
                           tuning_dir=Path(tuning.path) if tuning else None)
        Path(summary.path).write_text(result.to_markdown())
