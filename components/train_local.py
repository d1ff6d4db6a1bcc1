"""Component `train_local`: the local-only baseline, every client training alone.

Deterministic, so the pipeline caches it: it takes only the spec sections it reads (see
`pflpipe.pipelines.cache`) and tracks nothing; `collect_results` logs its results.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def train_local(spec_json: str, seed: int, partition: Input[Dataset], results: Output[Model],
                summary: Output[Markdown], resume: str = "all", shard: int = -1):
    """Train the local baseline; write its results directory (model `local`).

    `shard` ≥ 0: only that client shard of `engine.shards` (merged by `merge_shards`).
    """
    from pflpipe import events

    with events.stage("train_local", named=summary, seed=seed,
                      shard=None if shard < 0 else shard):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import train_local as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, Path(partition.path), Path(results.path), progress=True,
                           resume=resume, shard=None if shard < 0 else shard)
        Path(summary.path).write_text(result.to_markdown())
