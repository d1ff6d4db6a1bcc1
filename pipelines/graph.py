"""The pipeline graph of one spec.

```
for each seed:
  partition_data ─► warm_start_fedavg ─► select_teachers ─► distill_grid_search ─┐
        │                  └─► for each algorithm: personalize[label] ──────────┤
        └─► train_local ─────────────────────────────────────────────────────────┴─► collect_results
evaluate_fairness(Collected(collect_results))      one report, mean ± std over the seeds
```
With a `tuning` section, the tuning seeds' tasks run beside those (`engine.parallel_tasks`
bounds each of the two seed loops):
```
for each tuning seed:
  partition_data ─► warm_start_fedavg ─► for each grid point: tune_point ─► tune (this seed)
tune(Collected(tune))      each tuned entry's setting, chosen on the tuning seeds' validation
```
and the reported seeds' tuned entries run in a loop of their own whose personalize tasks read
that choice (an artifact), so the untuned entries' tasks keep their cache keys.
With `engine.seeds_as_members`, a train_members task runs before the seeds loop (every seed's
partition_data follows it): it trains the seeds of warm_start_fedavg, train_local and the untuned
personalize entries (entries of one algorithm that differ in hyper-parameters it takes per
member: together) as members of one federation and leaves each seed's checkpoints finished
(`pflpipe.stages.train_members`); the loop's tasks, unchanged and resuming, then train nothing.
When it trains every task of the seeds (`pflpipe.stages.train_members.whole`: nothing trains per
seed, no tuning), the seeds loop is one collect_members task per seed, which collects the seed's
results from its output as collect_results would: no task is started only to find its work done.
With a tuning section, a second one does the same before the tuning seeds loop: their warm
starts, and every tuned entry's grid points × tuning seeds as members.
With `engine.shards` = N, train_local and distill_grid_search are each a loop of N tasks, one per
client shard, followed by merge_shards (`pflpipe.stages.merge_shards`); a personalize entry whose
clients train alone (fedavg_ft) is N items of the personalize loop, and collect_results merges them.
A sweep (`build_sweep_pipeline`) runs every point's tasks in one seeds loop, each task once however
many points share it, and an evaluate_fairness per point. Every task but collect_results and
evaluate_fairness is cached on the spec settings it reads (`pflpipe.pipelines.cache`);
evaluate_fairness, the one task that tracks, logs every seed into MLflow. Loop bodies receive only
loop items (a personalize task's label, scoped spec and client shard), constants (the spec as JSON)
and pipeline parameters (`resume`), never a parameter output of a task outside the loop: kfp.local
replaces such a value with the loop item (docs/kfp-local.md). Artifacts cross loop boundaries
unharmed.
"""

from kfp import dsl
from kfp.dsl import Artifact

from pflpipe.components.collect_members import collect_members
from pflpipe.components.collect_results import collect_results
from pflpipe.components.distill_grid_search import distill_grid_search
from pflpipe.components.evaluate_fairness import evaluate_fairness
from pflpipe.components.merge_shards import merge_shards
from pflpipe.components.partition_data import partition_data
from pflpipe.components.personalize import personalize
from pflpipe.components.select_teachers import select_teachers
from pflpipe.components.train_local import train_local
from pflpipe.components.train_members import train_members
from pflpipe.components.tune import tune
from pflpipe.components.tune_point import tune_point
from pflpipe.components.warm_start_fedavg import warm_start_fedavg
from pflpipe.pipelines.cache import (
    CACHED,
    PER_ENTRY,
    is_sharded,
    members_specs_json,
    scoped_spec_json,
    task_spec_json,
    tuning_items,
    tuning_members_specs_json,
)
from pflpipe.pipelines.platform import configure
from pflpipe.spec import Spec
from pflpipe.spec.algorithms import PERSONALIZE
from pflpipe.stages.train_members import whole


def personalize_labels(spec: Spec) -> list[str]:
    """The entries the `personalize` stage runs, by display name."""
    return [entry.display_name for entry in spec.personalization if entry.name in PERSONALIZE]


def personalize_items(spec: Spec) -> list[dict[str, str]]:
    """The personalize loop's items: an entry's label, its scoped spec and its client shard.

    An entry whose clients train alone is one item per shard of `engine.shards` when sharded
    (`collect_results` merges them), any other one item with shard "" (every client). The shard
    is a string: KFP gives every field of a loop item the type of the item's first value.
    """
    return [{"label": label, "spec_json": scoped_spec_json(spec, "personalize", label),
             "shard": str(shard)}
            for label in personalize_labels(spec)
            for shard in (range(spec.engine.shards) if is_sharded(spec, "personalize", label)
                          else ("",))]


def model_names(spec: Spec) -> list[str]:
    """Every model the pipeline trains, once each, in the order of the results tables."""
    names = ["fedavg", *([spec.local_params.display_name] if spec.runs_local else [])]
    if spec.has_persfl:
        names.append(spec.distillation.model_name)
    return list(dict.fromkeys(names + personalize_labels(spec)))


def parallelism(spec: Spec, seeds: list[int] | None = None) -> tuple[int, int]:
    """ParallelFor parallelism of the seeds loop and of the nested personalize loop (0: all).

    With `engine.parallel_tasks` = P, at most P tasks run at once: the seeds loop runs
    min(P, seeds) iterations at once and each of them P // that many personalize tasks.
    `seeds`: the seeds of the loop (the tuning seeds'), experiment.seeds when omitted.
    """
    limit = spec.engine.parallel_tasks
    if not limit:
        return 0, 0
    seeds = min(limit, len(seeds or spec.experiment.seeds))
    return seeds, max(1, limit // seeds)


def build_pipeline(spec: Spec):
    """Return the KFP pipeline of `spec` (call it under kfp.local, or compile it).

    Its parameters are the tracking settings, so one compiled file serves any MLflow setup:
    `tracking_uri`, `experiment` and `parent_run_id` (empty: `evaluate_fairness` opens a parent
    run when a tracking URI is known, else nothing is tracked), and `resume`: which checkpoints
    of an earlier run the training stages resume from (all, unfinished or none;
    `pflpipe.training.resumable_rounds.RESUME`). Its output is the report directory; a sweep's
    (`build_sweep_pipeline`) are each point's.
    """
    if spec.sweep:
        return build_sweep_pipeline(spec)

    @dsl.pipeline(name=spec.experiment.name,
                  description=spec.experiment.description or "pflpipe experiment")
    def pipeline(tracking_uri: str = spec.tracking.uri or "",
                 experiment: str = spec.tracking.experiment or spec.experiment.name,
                 parent_run_id: str = "", resume: str = "all") -> Artifact:
        tracking = {"tracking_uri": tracking_uri, "experiment": experiment,
                    "parent_run_id": parent_run_id}
        return _experiment(spec, tracking, resume).outputs["report"]

    return pipeline


def point_outputs(spec: Spec) -> list[str]:
    """The sweep pipeline's outputs: each point's report directory, in the points' order."""
    from pflpipe.spec.sweep import points

    return [f"point_{index}" for index in range(len(points(spec)))]


def build_sweep_pipeline(spec: Spec):
    """Return the one pipeline of a sweep (`pflpipe.spec.sweep`): every point × seed.

    Each point's tasks have the inputs of the point's spec run alone (`build_pipeline`): the
    same cache keys, the same results. The points share one seeds loop, in which a task whose
    inputs another point's task already has is that task (`_once`; a personalization setting
    swept: each seed's partition, warm start and local baseline run once). A point with a tuning
    section or `engine.seeds_as_members` gets its own graph beside the others (nothing shared).
    Each point's evaluate_fairness logs into a child run of the sweep's parent run
    (`pflpipe.stages.evaluate_fairness.run_in_pipeline`). Its outputs (`point_outputs`) are the
    points' report directories.
    """
    import json
    import typing

    from pflpipe.spec.sweep import points

    found = points(spec)
    outputs = typing.NamedTuple("Outputs", [(name, Artifact) for name in point_outputs(spec)])
    described = [json.dumps({"label": p.label, "overrides": p.overrides}, sort_keys=True)
                 for p in found]   # each point's evaluate_fairness `sweep_point`
    # tuning and train_members shape a graph of their own per point: nothing shared
    alone = any(p.spec.tuning or p.spec.engine.seeds_as_members for p in found)

    @dsl.pipeline(name=spec.experiment.name,
                  description=spec.experiment.description or "pflpipe sweep")
    def pipeline(tracking_uri: str = spec.tracking.uri or "",
                 experiment: str = spec.tracking.experiment or spec.experiment.name,
                 parent_run_id: str = "", resume: str = "all") -> outputs:
        tracking = {"tracking_uri": tracking_uri, "experiment": experiment,
                    "parent_run_id": parent_run_id}
        if alone:
            reports = [_experiment(point.spec, tracking, resume, text)
                       for point, text in zip(found, described, strict=True)]
        else:
            reports = _shared_points(spec, found, tracking, resume, described)
        return outputs(*(report.outputs["report"] for report in reports))

    return pipeline


def _shared_points(spec: Spec, found: list, tracking: dict, resume, described: list[str]):
    """Every point's tasks in one seeds loop, each task made once (`_once`); their reports."""
    seeds_at_once, _ = parallelism(spec)
    collects = []
    with dsl.ParallelFor(spec.experiment.seeds, name="for each seed",
                         parallelism=seeds_at_once) as seed:
        shared: dict = {}
        for point in found:
            scoped = {stage: scoped_spec_json(point.spec, stage) for stage in CACHED
                      if stage not in (*PER_ENTRY, "train_members", "tune")}
            collects.append(_seed_tasks(
                point.spec, seed, task_spec_json(point.spec), scoped,
                (personalize_items(point.spec), parallelism(point.spec)[1]), resume,
                shared=shared))
    return [configure(evaluate_fairness(
        spec_json=task_spec_json(point.spec), results=dsl.Collected(collect.outputs["results"]),
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, sweep_point=text, **tracking), point.spec,
        "evaluate_fairness") for point, collect, text in zip(found, collects, described,
                                                             strict=True)]


def _experiment(spec: Spec, tracking: dict, resume, sweep_point: str = ""):
    """The tasks of one experiment (a sweep's point); returns its evaluate_fairness task."""
    spec_json = task_spec_json(spec)
    scoped = {stage: scoped_spec_json(spec, stage) for stage in CACHED
              if stage not in (*PER_ENTRY, "train_members") and (stage != "tune" or spec.tuning)}
    entries = personalize_items(spec)
    seeds_at_once, labels_at_once = parallelism(spec)
    chosen = _tuning_tasks(spec, scoped, resume) if spec.tuning else None
    members = None
    if spec.engine.seeds_as_members:
        members = configure(train_members(specs_json=members_specs_json(spec),
                                          resume=resume, **_whole(spec)), spec,
                            "train_members")
    with dsl.ParallelFor(spec.experiment.seeds, name="for each seed",
                         parallelism=seeds_at_once) as seed:
        if members is not None and whole(spec):   # it trained everything: collect only
            collect = configure(collect_members(
                spec_json=spec_json, seed=seed, members=members.outputs["members"]),
                spec, "collect_members")
        else:
            collect = _seed_tasks(spec, seed, spec_json, scoped, (entries, labels_at_once),
                                  "all" if members else resume, chosen, members)
    point = {"sweep_point": sweep_point} if sweep_point else {}
    return configure(evaluate_fairness(
        spec_json=spec_json, results=dsl.Collected(collect.outputs["results"]),
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, **tracking, **point), spec,
        "evaluate_fairness")


def _whole(spec: Spec) -> dict:
    """train_members' `whole` argument: given only when set (so other graphs keep their IR)."""
    return {"whole": True} if whole(spec) else {}


def _tuning_tasks(spec: Spec, scoped: dict[str, str], resume):
    """The tuning seeds' tasks; returns the artifact holding each tuned entry's choice.

    With `engine.seeds_as_members`, a train_members task of their own comes first.
    """
    seeds_at_once, points_at_once = parallelism(spec, spec.tuning.seeds)
    members = None
    if spec.engine.seeds_as_members:
        members = configure(train_members(specs_json=tuning_members_specs_json(spec),
                                          resume=resume), spec, "train_members")
        resume = "all"
    with dsl.ParallelFor(spec.tuning.seeds, name="for each tuning seed",
                         parallelism=seeds_at_once) as seed:
        partition, warm = _warm_start(spec, seed, scoped, resume, members)
        with dsl.ParallelFor(tuning_items(spec), name="for each grid point",
                             parallelism=points_at_once) as point:
            scored = configure(tune_point(
                spec_json=point.spec_json, seed=seed, label=point.label, values=point.values,
                resume=resume, partition=partition, checkpoints=warm.outputs["checkpoints"]),
                spec, "tune_point")
        per_seed = configure(tune(spec_json=scoped["tune"],
                                  scores=dsl.Collected(scored.outputs["results"])), spec, "tune")
    return configure(tune(spec_json=scoped["tune"],
                          scores=dsl.Collected(per_seed.outputs["chosen"])), spec,
                     "tune").outputs["chosen"]


def _once(shared: dict | None, stage: str, inputs: dict, make):
    """`make()`, or the value it gave for the same stage and inputs earlier in `shared`.

    A sweep's points share one seeds loop; a task whose inputs (its scoped spec, the seed, its
    input artifacts, which name the tasks that made them) another point's task already has is
    that task. `shared` None: nothing is shared.
    """
    if shared is None:
        return make()
    key = (stage, *sorted((name, str(value)) for name, value in inputs.items()))
    if key not in shared:
        shared[key] = make()
    return shared[key]


def _warm_start(spec: Spec, seed, scoped: dict[str, str], resume, members=None, shared=None):
    """partition_data and warm_start_fedavg of one seed: the partition and the warm-start task.

    After `members` (the train_members task), when given: every task of the seed follows.
    `shared`: the tasks of the sweep's seed so far (`_once`).
    """
    inputs = dict(spec_json=scoped["partition_data"], seed=seed, resume=resume)
    task = _once(shared, "partition_data", inputs, lambda: configure(
        partition_data(**inputs), spec, "partition_data"))
    if members is not None:
        task.after(members)
    partition = task.outputs["partition"]
    warming = dict(spec_json=scoped["warm_start_fedavg"], seed=seed, resume=resume,
                   partition=partition)
    warm = _once(shared, "warm_start_fedavg", warming, lambda: configure(
        warm_start_fedavg(**warming), spec, "warm_start_fedavg"))
    return partition, warm


def _seed_tasks(spec: Spec, seed, spec_json: str, scoped: dict[str, str],
                personalizing: tuple[list[dict], int], resume, chosen=None, members=None,
                shared=None):
    """The tasks of one seed: the training stages, then collect_results (returned).

    `personalizing` holds the personalize loop's items and its parallelism; `chosen`, the tune
    stage's output, is read by the tuned entries' personalize tasks; `members`, the
    train_members task, runs first; `shared`, a sweep's tasks of this seed so far (`_once`:
    every stage but the personalize loop and collect_results is shared between points).
    """
    partition, warm = _warm_start(spec, seed, scoped, resume, members, shared)
    checkpoints = warm.outputs["checkpoints"]
    gathered = {"fedavg": warm.outputs["results"]}
    entries, at_once = personalizing
    if spec.runs_local:
        local = dict(spec_json=scoped["train_local"], seed=seed, resume=resume,
                     partition=partition)
        gathered["local"] = _once(shared, "train_local", local, lambda: _sharded(
            spec, at_once, train_local, "train_local", local))
    if spec.has_persfl:
        choosing = dict(spec_json=scoped["select_teachers"], seed=seed, checkpoints=checkpoints)
        teachers = _once(shared, "select_teachers", choosing, lambda: configure(
            select_teachers(**choosing), spec, "select_teachers"))
        distilling = dict(spec_json=scoped["distill_grid_search"], seed=seed,
                          partition=partition, checkpoints=checkpoints,
                          teachers=teachers.outputs["teachers"])
        gathered["persfl"] = _once(shared, "distill_grid_search", distilling, lambda: _sharded(
            spec, at_once, distill_grid_search, "distill_grid_search", distilling))
    tuned = [e for e in entries if spec.tuning and spec.tuning.find(e["label"])]
    loops = {"personalized": ([e for e in entries if e not in tuned], "for each algorithm", {}),
             "tuned": (tuned, "for each tuned algorithm", {"tuning": chosen})}
    for key, (items, name, extra) in loops.items():
        if not items:
            continue
        with dsl.ParallelFor(items, name=name, parallelism=at_once) as entry:
            personal = configure(personalize(
                spec_json=entry.spec_json, seed=seed, label=entry.label, shard=entry.shard,
                resume=resume, partition=partition, checkpoints=checkpoints, **extra),
                spec, "personalize")
        gathered[key] = dsl.Collected(personal.outputs["results"])
    return configure(collect_results(
        spec_json=spec_json, seed=seed, partition=partition, checkpoints=checkpoints,
        **gathered), spec, "collect_results")


def _sharded(spec: Spec, at_once: int, component, stage: str, inputs: dict):
    """The results of `stage`: one task, or one task per client shard and their merge.

    With `engine.shards` > 1, a ParallelFor over the shards, then `merge_shards`
    (`pflpipe.stages.merge_shards`).
    """
    shards = spec.engine.shards
    if shards == 1:
        return configure(component(**inputs), spec, stage).outputs["results"]
    with dsl.ParallelFor(list(range(shards)), name=f"for each {stage} shard",
                         parallelism=at_once) as shard:
        part = configure(component(**inputs, shard=shard), spec, stage)
    return configure(merge_shards(shards=dsl.Collected(part.outputs["results"])), spec,
                     "merge_shards").outputs["results"]
