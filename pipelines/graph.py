"""The pipeline graph of one spec.

```
ParallelFor seed:
  partition_data ─► warm_start_fedavg ─► select_teachers ─► distill_grid_search ─┐
        │                  └─► ParallelFor label: personalize[label] ──────────┤
        └─► train_local ─────────────────────────────────────────────────────────┴─► collect_results
evaluate_fairness(Collected(collect_results))      one report, mean ± std over the seeds
```
Loop bodies receive only loop items, constants (the spec as JSON) and pipeline parameters (the
tracking settings), never a parameter output of a task outside the loop: kfp.local replaces such
a value with the loop item (docs/kfp-local.md). Artifacts cross loop boundaries unharmed.
"""

from kfp import dsl
from kfp.dsl import Artifact

from pflpipe.components.collect_results import collect_results
from pflpipe.components.distill_grid_search import distill_grid_search
from pflpipe.components.evaluate_fairness import evaluate_fairness
from pflpipe.components.partition_data import partition_data
from pflpipe.components.personalize import personalize
from pflpipe.components.select_teachers import select_teachers
from pflpipe.components.train_local import train_local
from pflpipe.components.warm_start_fedavg import warm_start_fedavg
from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.pipelines.platform import configure
from pflpipe.spec import Spec
from pflpipe.spec.algorithms import PERSONALIZE


def personalize_labels(spec: Spec) -> list[str]:
    """The entries the `personalize` stage runs, by display name."""
    return [entry.display_name for entry in spec.personalization if entry.name in PERSONALIZE]


def build_pipeline(spec: Spec):
    """Return the KFP pipeline of `spec` (call it under kfp.local, or compile it).

    Its parameters are the tracking settings, so one compiled file serves any MLflow setup:
    `tracking_uri`, `experiment` and `parent_run_id` (empty: the stages track nothing). Its
    output is the report directory.
    """
    spec_json = spec.model_dump_json(by_alias=True)
    labels = personalize_labels(spec)

    @dsl.pipeline(name=spec.experiment.name,
                  description=spec.experiment.description or "pflpipe experiment")
    def pipeline(tracking_uri: str = spec.tracking.uri or "",
                 experiment: str = spec.tracking.experiment or spec.experiment.name,
                 parent_run_id: str = "") -> Artifact:
        tracking = {"tracking_uri": tracking_uri, "experiment": experiment,
                    "parent_run_id": parent_run_id}
        with dsl.ParallelFor(spec.experiment.seeds) as seed:
            part = configure(partition_data(
                spec_json=scoped_spec_json(spec, "partition_data"), seed=seed),
                spec, "partition_data")
            partition = part.outputs["partition"]
            warm = configure(warm_start_fedavg(
                spec_json=scoped_spec_json(spec, "warm_start_fedavg"), seed=seed,
                partition=partition), spec, "warm_start_fedavg")
            checkpoints = warm.outputs["checkpoints"]
            local = configure(train_local(spec_json=spec_json, seed=seed, partition=partition,
                                          **tracking), spec, "train_local")
            gathered = {"fedavg": warm.outputs["results"], "local": local.outputs["results"]}
            if spec.has_persfl:
                teachers = configure(select_teachers(
                    spec_json=spec_json, seed=seed, checkpoints=checkpoints, **tracking),
                    spec, "select_teachers")
                distill = configure(distill_grid_search(
                    spec_json=spec_json, seed=seed, partition=partition,
                    checkpoints=checkpoints, teachers=teachers.outputs["teachers"],
                    **tracking), spec, "distill_grid_search")
                gathered["persfl"] = distill.outputs["results"]
            if labels:
                with dsl.ParallelFor(labels) as label:
                    personal = configure(personalize(
                        spec_json=spec_json, seed=seed, label=label, partition=partition,
                        checkpoints=checkpoints, **tracking), spec, "personalize")
                gathered["personalized"] = dsl.Collected(personal.outputs["results"])
            collect = configure(collect_results(spec_json=spec_json, seed=seed, **gathered,
                                                **tracking),
                                spec, "collect_results")
        report = configure(evaluate_fairness(
            spec_json=spec_json, results=dsl.Collected(collect.outputs["results"]), **tracking),
            spec, "evaluate_fairness")
        return report.outputs["report"]

    return pipeline
