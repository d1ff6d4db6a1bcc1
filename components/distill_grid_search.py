"""Component `distill_grid_search`: PersFL stage 2, every client × (λ, T) student at once.

Cached on the spec sections it reads (see `pflpipe.pipelines.cache`); tracks nothing:
`collect_results` logs its results.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def distill_grid_search(spec_json: str, seed: int, partition: Input[Dataset],
                        checkpoints: Input[Model], teachers: Input[Dataset],
                        results: Output[Model], summary: Output[Markdown], shard: int = -1):
    """Distil each client's teacher over the λ/T grid; write the results directory.

    `shard` ≥ 0: only that client shard of `engine.shards` (merged by `merge_shards`).
    """
    from pflpipe import events

    with events.stage("distill_grid_search", named=summary, seed=seed,
                      shard=None if shard < 0 else shard):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import distill_grid_search as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, Path(partition.path), Path(checkpoints.path),
                           Path(teachers.path), Path(results.path),
                           shard=None if shard < 0 else shard)
        Path(summary.path).write_text(result.to_markdown())
