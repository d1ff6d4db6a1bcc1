"""Run a spec's whole pipeline in this one process, into a folder laid out as `pflpipe run`'s.

The same stage functions `pflpipe run`'s components call, in the pipeline's order and with the
same scoped specs (`pipelines.cache`): for each tuning seed partition_data, warm_start_fedavg and
every grid point's tune_point, then tune per seed and over the seeds; for each reported seed
partition_data, warm_start_fedavg, train_local, select_teachers and distill_grid_search (PersFL),
each personalize entry (a tuned one at the setting tune chose), collect_results; then
evaluate_fairness. No kfp, no MLflow, no caching: one Python process instead of one per task,
which on a loaded machine is most of a small run's time. The run folder holds `seed-N/` (each
seed's collected results) and `report/`, as `<results>/latest` of `pflpipe run` does, so
benchmarks/results_tables.py reads either.

    python benchmarks/results_run.py specs/results-digits.yaml /tmp/runs/digits [--set PATH=VALUE]

With `--part tuning:SEED` or `--part seed:SEED` one process runs one tuning or reported seed
(several at once; a reported seed's tuned entries wait for every tuning seed's choice); a plain
run afterwards reuses every scored grid point, tuning seed and collected seed already in the
folder and writes the report.
"""

import argparse
import json
import time
from pathlib import Path

import torch
import yaml

from pflpipe import layout
from pflpipe.api import load_spec
from pflpipe.pipelines.cache import scoped_spec_json, tuning_items
from pflpipe.pipelines.graph import personalize_items
from pflpipe.spec import Spec
from pflpipe.stages import (
    collect_results,
    distill_grid_search,
    evaluate_fairness,
    partition_data,
    personalize,
    select_teachers,
    train_local,
    tune,
    tune_point,
    warm_start_fedavg,
)


def scoped(spec: Spec, stage: str, label: str | None = None) -> Spec:
    return Spec.model_validate_json(scoped_spec_json(spec, stage, label))


def timed(name: str, fn, *args, **kwargs):
    start = time.process_time()
    result = fn(*args, **kwargs)
    print(f"  {name}: {time.process_time() - start:.1f} s CPU", flush=True)
    return result


def warm_start(spec: Spec, seed: int, work: Path) -> tuple[Path, Path, Path]:
    """partition_data and warm_start_fedavg of one seed: partition, checkpoints, results."""
    part, ckpt, res = work / "partition", work / "checkpoints", work / "fedavg"
    timed(f"partition_data seed {seed}", partition_data.run,
          scoped(spec, "partition_data"), seed, part)
    timed(f"warm_start_fedavg seed {seed}", warm_start_fedavg.run,
          scoped(spec, "warm_start_fedavg"), seed, part, ckpt, res)
    return part, ckpt, res


def tuning_seed(spec: Spec, seed: int, work: Path) -> Path:
    """One tuning seed's grid points and its tune; a point already scored is not rerun."""
    base = work / f"tuning-{seed}"
    part, ckpt, _ = warm_start(spec, seed, base)
    scored = []
    for i, item in enumerate(tuning_items(spec)):
        out = base / f"point-{i:03d}"
        if not (out / layout.POINT_JSON).is_file():
            timed(f"tune_point {item['label']} {item['values']} seed {seed}", tune_point.run,
                  Spec.model_validate_json(item["spec_json"]), seed, item["label"],
                  json.loads(item["values"]), part, ckpt, out)
        scored.append(out)
    tune.run(scoped(spec, "tune"), scored, base / "tune")
    return base / "tune"


def tuning(spec: Spec, work: Path) -> Path:
    """The tuning seeds' grid points and the tune stage; returns the choice's directory.

    A tuning seed whose choice is already in `work` (a `--part tuning:SEED` run) is reused.
    """
    per_seed = [work / f"tuning-{s}" / "tune" for s in spec.tuning.seeds]
    for seed, done in zip(spec.tuning.seeds, per_seed, strict=True):
        if not (done / layout.TUNING_JSON).is_file():
            tuning_seed(spec, seed, work)
    tune.run(scoped(spec, "tune"), per_seed, work / "tune")
    return work / "tune"


def waited_choice(spec: Spec, work: Path, name: str) -> Path:
    """tune over the tuning seeds, once each seed's choice is in `work` (other processes')."""
    per_seed = [work / f"tuning-{s}" / "tune" for s in spec.tuning.seeds]
    while not all((d / layout.TUNING_JSON).is_file() for d in per_seed):
        time.sleep(10)
    time.sleep(2)  # the last file's writer has finished
    tune.run(scoped(spec, "tune"), per_seed, work / name)
    return work / name


def one_seed(spec: Spec, seed: int, work: Path, chosen, out: Path) -> Path:
    """Every training stage of one reported seed and its collect_results; the collected dir.

    The untuned entries train first and the tuned ones after (the order of the pipeline's two
    loops and of collect_results' inputs); `chosen` is the tune output, or a function that
    returns it once the tuning is done.
    """
    base = work / f"seed-{seed}"
    part, ckpt, fedavg = warm_start(spec, seed, base)
    dirs = [fedavg]
    if spec.runs_local:
        dirs.append(base / "local")
        timed(f"train_local seed {seed}", train_local.run,
              scoped(spec, "train_local"), seed, part, dirs[-1])
    if spec.has_persfl:
        teachers, dirs = base / "teachers", [*dirs, base / "persfl"]
        select_teachers.run(scoped(spec, "select_teachers"), ckpt, teachers)
        timed(f"distill_grid_search seed {seed}", distill_grid_search.run,
              scoped(spec, "distill_grid_search"), seed, part, ckpt, teachers, dirs[-1])
    items = personalize_items(spec)
    is_tuned = [bool(spec.tuning and spec.tuning.find(item["label"])) for item in items]
    for item, tuned in sorted(zip(items, is_tuned, strict=True), key=lambda pair: pair[1]):
        label = item["label"]
        if tuned and callable(chosen):
            chosen = chosen()
        tuned = chosen if tuned else None
        dirs.append(base / f"entry-{label}")
        timed(f"personalize[{label}] seed {seed}", personalize.run,
              Spec.model_validate_json(item["spec_json"]), seed, label, part, ckpt, dirs[-1],
              tuning_dir=tuned)
    collected = out / layout.seed_folder(seed)
    collect_results.run(spec, seed, dirs, collected, partition_dir=part, checkpoints_dir=ckpt)
    return collected


def report(spec: Spec, seeds: list[int], out: Path) -> None:
    """evaluate_fairness over the collected seeds `seeds` of the run folder `out`."""
    evaluate_fairness.run(spec, [out / layout.seed_folder(s) for s in seeds], out / "report",
                          run_info={"experiment": spec.experiment.name,
                                    "seeds": ", ".join(map(str, seeds)),
                                    "data": f"{spec.dataset.name}, {spec.partition.strategy}, "
                                            f"{spec.partition.n_clients} clients"})
    print(f"done: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("out", type=Path, help="the run folder (seed-N/, report/, work/)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="override a spec setting, as pflpipe run --set")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--part", help="only 'tuning:SEED' (one tuning seed's points), "
                        "'seed:SEED' (one reported seed) or 'report' (evaluate_fairness over "
                        "the seeds collected so far); a later full run reuses what they wrote")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {path: yaml.safe_load(text)
                 for path, _, text in (item.partition("=") for item in args.set)}
    spec = load_spec(args.spec, **overrides)
    spec = Spec.model_validate({**spec.model_dump(mode="json", by_alias=True),
                                "tracking": {"enabled": False}})
    work = args.out / "work"
    kind, _, seed = (args.part or "").partition(":")
    if kind == "tuning":  # one tuning seed, beside other processes (a loaded machine)
        tuning_seed(spec, int(seed), work)
        return
    if kind == "report":  # evaluate_fairness over the seeds collected so far
        seeds = [s for s in spec.experiment.seeds
                 if (args.out / layout.seed_folder(s) / layout.RESULTS_CSV).is_file()]
        report(spec, seeds, args.out)
        return
    if kind == "seed":  # one reported seed; its tuned entries wait for the tuning seeds
        chosen = spec.tuning and (lambda: waited_choice(spec, work, f"tune-for-seed-{seed}"))
        one_seed(spec, int(seed), work, chosen or None, args.out)
        return
    chosen = tuning(spec, work) if spec.tuning else None
    seeds = [args.out / layout.seed_folder(s) for s in spec.experiment.seeds]
    for seed, done in zip(spec.experiment.seeds, seeds, strict=True):
        if not (done / layout.RESULTS_CSV).is_file():
            one_seed(spec, seed, work, chosen, args.out)
    report(spec, spec.experiment.seeds, args.out)


if __name__ == "__main__":
    main()
