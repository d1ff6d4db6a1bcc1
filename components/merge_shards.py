"""Component `merge_shards`: join the results directories of a stage's client shards into one.

The local baseline and PersFL's distillation grid run one task per client shard when the spec
sets `engine.shards`; this task merges them into the directory the unsharded stage writes
(`pflpipe.stages.merge_shards`). It reads no spec and tracks nothing.
"""

from kfp import dsl
from kfp.dsl import Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def merge_shards(shards: Input[list[Model]], results: Output[Model], summary: Output[Markdown]):
    """Merge every shard's results directory into `results`."""
    from pflpipe import events

    with events.stage("merge_shards"):
        from pathlib import Path

        from pflpipe.stages import merge_shards as stage

        result = stage.run([Path(shard.path) for shard in shards], Path(results.path))
        Path(summary.path).write_text(result.to_markdown())
