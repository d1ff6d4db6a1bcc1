"""Component `warm_start_fedavg`: FedAvg from the seeded model, every round's global model kept.

Deterministic, so the pipeline caches it: it takes only the spec sections that decide the result
(see `pflpipe.pipelines.cache`), the seed and the partition, and tracks nothing (a tracked run id
would change its cache key on every run); its per-round, per-client scores are in its artifacts.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Model, Output

from pflpipe.components._image import PFLPIPE_IMAGE


@dsl.component(base_image=PFLPIPE_IMAGE, install_kfp_package=False)
def warm_start_fedavg(spec_json: str, seed: int, partition: Input[Dataset],
                      checkpoints: Output[Model], results: Output[Model],
                      summary: Output[Markdown], resume: str = "all"):
    """Run (or resume: all, unfinished, none) FedAvg; write the checkpoint and results dirs."""
    from pflpipe import events

    with events.stage("warm_start_fedavg", named=summary, seed=seed):
        from pathlib import Path

        from pflpipe.spec import Spec
        from pflpipe.stages import warm_start_fedavg as stage

        spec = Spec.model_validate_json(spec_json)
        result = stage.run(spec, seed, Path(partition.path), Path(checkpoints.path),
                           Path(results.path), progress=True, resume=resume)
        Path(summary.path).write_text(result.to_markdown())
