"""pFedVEM against the baselines of its Table 1, PM and GM, on digits label skew with J = 50.

Runs the spec (specs/pfedvem-digits.yaml by default) in-process for each seed: partition_data,
then FedAvg (the warm start's algorithm, as a global baseline), every personalization entry and
the local baseline, each from the seeded initial model with its entry's settings — the
computation the pipeline's stages run. PM (personalized model) and GM (global model) accuracy
come from the engine's FederationResult directly: PM is `test_accuracy`, GM
`global_test_accuracy` (the global model scored on each client's test split), both the
unweighted mean over all clients after the last round (the paper reports the last round), then
mean ± SEM over seeds. The best-on-validation PM and the mean validation accuracies (the tuning
criterion) are printed too.

    python benchmarks/pfedvem.py                                   # the spec's seeds
    python benchmarks/pfedvem.py --seeds 0 --only pfedvem --set pfedvem.head_lr=0.01
    python benchmarks/pfedvem.py --federation lr=0.1 --seeds 0 --rounds 30   # tuning
    python benchmarks/pfedvem.py --jobs 2 --out pfedvem.md         # (re)write its section

--out replaces only the text between this benchmark's markers in the file (appended if absent).
Each model's scores per seed are kept in --workdir (`seed-<n>/<label>.json`): a run given the same
--workdir, spec and overrides reuses them, so an interrupted run resumes.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from pflpipe.algorithms import FedAvg, build
from pflpipe.engine.federation import Federation, Plan
from pflpipe.errors import DivergenceError
from pflpipe.markdown import replace_section
from pflpipe.spec import Spec, read_spec
from pflpipe.stages import partition_data
from pflpipe.stages.personalize import stream_of
from pflpipe.training import stage_setup

REPO = Path(__file__).resolve().parent.parent
BEGIN = "<!-- benchmarks/pfedvem.py: begin -->"
END = "<!-- benchmarks/pfedvem.py: end -->"
#: Models whose global model is the paper's GM only (no PM column), and PM-only models.
GM_ONLY, PM_ONLY = ("fedavg", "fedprox", "scaffold"), ("fedper", "fedrep", "per_fedavg", "local")


def value(text: str):
    """A --set / --federation value: JSON when it parses (numbers, true, null), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_spec(path: Path, root: Path, args) -> Spec:
    """The spec with the command line's overrides, no tracking, local storage under `root`."""
    data = read_spec(path).model_dump(mode="json", by_alias=True, exclude={"resources"})
    for item in args.federation:
        key, _, text = item.partition("=")
        data["federation"][key] = value(text)
    if args.rounds:
        data["federation"]["rounds"] = args.rounds
    for item in args.set:
        target, _, text = item.partition("=")
        label, _, key = target.partition(".")
        entries = [e for e in data["personalization"] if (e.get("label") or e["name"]) == label]
        if not entries:
            raise SystemExit(f"--set {item}: no entry labelled {label!r}")
        entries[0][key] = value(text)
    for entry in data["personalization"]:
        if args.rounds and entry.get("rounds"):
            entry["rounds"] = args.rounds
    data["tracking"] = {"enabled": False}
    data["storage"] = {"kind": "local", "path": str(root / "store")}
    data["engine"] = {**data["engine"], "device": "cpu"}
    return Spec.model_validate(data)


def run_model(spec: Spec, s, label: str, seed: int) -> dict[str, float] | str:
    """One model's scores for one seed, as the stages compute them (from the initial model).

    A run that diverges gives the error's first sentence instead.
    """
    fed = spec.federation
    if label == "fedavg":
        algorithm = FedAvg(None, head=s.head, lr=fed.lr, local_epochs=fed.local_epochs)
        plan = Plan(rounds=fed.rounds, local_epochs=fed.local_epochs, batch_size=fed.batch_size,
                    lr=fed.lr, seed=seed, optimizer=stage_setup.optimizer(spec),
                    client_fraction=fed.client_fraction, stream=0)
    else:
        entry = spec.algorithm(label)
        algorithm = build(entry, head=s.head, federation=fed)
        rounds = entry.rounds_of(fed)
        plan = Plan(rounds=rounds.rounds, local_epochs=rounds.local_epochs,
                    batch_size=entry.batch_size or fed.batch_size, lr=algorithm.lr, seed=seed,
                    optimizer=stage_setup.optimizer(spec), client_fraction=rounds.client_fraction,
                    eval_every=entry.eval_every, stream=stream_of(label),
                    score_global=algorithm.has_global_model)
    try:
        result = Federation(algorithm, s.ctx, s.data, s.trainer, plan).run(s.init)
    except DivergenceError as err:
        return str(err).split(";")[0]

    def mean(scores, name):   # None: not scored (an algorithm without a global model)
        return float(scores[name].mean()) * 100 if name in scores else None

    return {"pm": mean(result.last, "test_accuracy"),
            "gm": mean(result.last, "global_test_accuracy"),
            "pm_best_val": mean(result.best, "test_accuracy"),
            "val": mean(result.last, "val_accuracy"),
            "global_val": mean(result.last, "global_val_accuracy")}


def labels_of(spec: Spec, only: list[str]) -> list[str]:
    """fedavg, the spec's entries in order, local (restricted to `only` when given)."""
    labels = ["fedavg", *(e.display_name for e in spec.personalization
                          if e.name != "local"), spec.local_params.display_name]
    return [label for label in labels if not only or label in only]


def sem(values: list[float]) -> float:
    """Standard error of the mean (ddof 1; 0 for one value)."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def cell(values: list[float]) -> str:
    """Mean ± SEM."""
    return f"{statistics.mean(values):.1f} ± {sem(values):.1f}"


def percent(value: float | None) -> str:
    """One decimal; "–" for no value (a model without a global model has no GM)."""
    return "–" if value is None else f"{value:.1f}"


def table(scores: dict[str, list[dict]], spec: Spec) -> str:
    """The markdown table: PM and GM as in the paper's Table 1, then the other scores."""
    names = {e.display_name: e.name for e in spec.personalization}
    lines = ["| model | PM % | GM % | PM best-val % | mean val % (PM / GM) |",
             "|---|---:|---:|---:|---:|"]
    for label, all_runs in scores.items():
        name = names.get(label, label)
        runs = [r for r in all_runs if isinstance(r, dict)]
        if len(runs) < len(all_runs):
            lines.append(f"| {label} | diverged on {len(all_runs) - len(runs)} of "
                         f"{len(all_runs)} seeds | | | |")
            continue
        pm = "–" if name in GM_ONLY else cell([r["pm"] for r in runs])
        no_gm = any(r["gm"] is None for r in runs)   # no global model
        gm = "–" if name in PM_ONLY or no_gm else cell([r["gm"] for r in runs])
        best = "–" if name in GM_ONLY else cell([r["pm_best_val"] for r in runs])
        global_val = None if no_gm else statistics.mean(r["global_val"] for r in runs)
        val = f"{statistics.mean(r['val'] for r in runs):.1f} / {percent(global_val)}"
        lines.append(f"| {label} | {pm} | {gm} | {best} | {val} |")
    return "\n".join(lines)


def report(scores, spec: Spec, seeds: list[int], seconds: dict[str, float], command: str) -> str:
    """This benchmark's Markdown section (what --out writes between its markers)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "pflpipe"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    entries = "\n".join(f"  - {e.model_dump(exclude_none=True)}" for e in spec.personalization
                        if e.display_name in scores)
    per_seed = "\n".join(
        f"| {label} | " + " | ".join(f"{r['pm']:.1f} / {percent(r['gm'])}" if isinstance(r, dict)
                                     else r for r in runs) + " |"
        for label, runs in scores.items())
    timing = ", ".join(f"{label} {s:.0f}" for label, s in seconds.items())
    return f"""{BEGIN}
# pFedVEM and the baselines of its Table 1 on digits, label skew, J = 50

Generated by `benchmarks/pfedvem.py` at commit {commit}\
{" with uncommitted changes in pflpipe/" if dirty else ""}, torch {torch.__version__}, CPU, \
{torch.get_num_threads()} thread(s):

```
{command}
```

Spec: `specs/pfedvem-digits.yaml`; seeds {", ".join(map(str, seeds))}.

- partition: {spec.partition.model_dump()}
- model: {spec.model.model_dump()}
- federation: {spec.federation.model_dump()}
- entries:
{entries}

PM: each client's personalized model on its own test split; GM: the algorithm's global model on
every client's test split; both the unweighted mean over the 50 clients after the last round,
mean ± SEM over seeds (the paper's protocol, except that its test sets are the global test set
restricted to each client's labels and GM uses the whole test set). "–" where the paper's Table 1
reports none. "PM best-val": each client's round chosen on its validation split instead.

{table(scores, spec)}

Per seed, PM / GM (%):

| model | {" | ".join(f"seed {s}" for s in seeds)} |
|---|{"---:|" * len(seeds)}
{per_seed}

Seconds per model (all seeds): {timing}.
{END}"""


def write_section(path: Path, section: str) -> None:
    """Replace this benchmark's section of `path` (or append it)."""
    replace_section(path, section, BEGIN, END)


def run_seed(spec: Spec, seed: int, root: Path, labels: list[str], threads: int
             ) -> tuple[dict[str, dict | str], dict[str, float]]:
    """Partition for `seed`, then run every model: their scores and seconds."""
    torch.set_num_threads(threads)
    partition_data.run(spec, seed, root / f"partition-{seed}")
    s = stage_setup.setup(spec, seed, root / f"partition-{seed}")
    scores, seconds = {}, {}
    for label in labels:
        cached = root / f"seed-{seed}" / f"{label}.json"
        if cached.exists():
            scores[label], seconds[label] = json.loads(cached.read_text())
        else:
            start = time.perf_counter()
            scores[label] = run_model(spec, s, label, seed)
            seconds[label] = time.perf_counter() - start
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps([scores[label], seconds[label]]))
        result = scores[label]
        shown = (", ".join(f"{k} {v:.2f}" for k, v in result.items() if v is not None)
                 if isinstance(result, dict) else result)
        print(f"seed {seed} {label}: {shown}", flush=True)
    return scores, seconds


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark; print the table and optionally write its section (--out)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, default=REPO / "specs" / "pfedvem-digits.yaml")
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--only", nargs="+", default=[], help="labels of the models to run")
    parser.add_argument("--set", action="append", default=[], help="label.param=value")
    parser.add_argument("--federation", action="append", default=[], help="key=value")
    parser.add_argument("--rounds", type=int, help="override every model's rounds (tuning)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="pfedvem-bench-"))
    spec = build_spec(args.spec, root, args)
    seeds = args.seeds or spec.experiment.seeds
    labels = labels_of(spec, args.only)
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(run_seed, *zip(*[(spec, seed, root, labels, args.threads)
                                              for seed in seeds], strict=True)))
    scores = {label: [run[0][label] for run in runs] for label in labels}
    seconds = {label: sum(run[1][label] for run in runs) for label in labels}
    print(table(scores, spec))
    if args.out:
        command = "python benchmarks/pfedvem.py " + " ".join(argv or sys.argv[1:])
        write_section(args.out, report(scores, spec, seeds, seconds, command))


if __name__ == "__main__":
    main()
