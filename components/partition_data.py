"""Component `partition_data`: split the spec's dataset over the clients for one seed.

Deterministic, so the pipeline caches it: it takes only the spec sections that decide the split
(see `pflpipe.pipelines.cache`) and the seed, and tracks nothing (a tracked run id would change
its cache key on every run).
"""

from kfp import dsl
from kfp.dsl import Dataset, Markdown, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def partition_data(spec_json: str, seed: int, partition: Output[Dataset],
                   summary: Output[Markdown], resume: str = "all"):
    """Write the partition directory (manifest, per-client tensors, label heatmap).

    With `resume` "all", a partition `pflpipe split` wrote for the same inputs is reused.
    """
    from pflpipe import events

    with events.stage("partition_data", named=summary, seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import partition_data as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, Path(partition.path), reuse_split=resume == "all")
        Path(summary.path).write_text(result.to_markdown())
