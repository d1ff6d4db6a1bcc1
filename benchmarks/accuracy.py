"""Mean client test accuracy of every personalization algorithm against FedAvg and local-only.

Scikit-learn's digits, 10 clients, DS-1 and DS-3 (issues 5 and 6). The federation, model,
teacher and distillation settings are the quickstart spec's (specs/persfl-digits.yaml: DS-1,
k = 4, 10 clients, 30 rounds); the benchmark swaps in its own partition per split (DS-1 k = 4
or DS-3 k = 2, the spec's n_clients), its personalization entries, no tracking and a CPU
engine. For each split and seed the stages run in-process, exactly as the pipeline chains them:
partition_data → warm_start_fedavg → train_local → personalize (one entry per algorithm) →
select_teachers → distill_grid_search.

Every number is the unweighted mean over clients of the test accuracy of each client's model chosen
on its validation split ("best_val"), then mean ± std over seeds. FedAvg's global model is one
model, so its round is chosen on the mean validation accuracy. PersFL's (λ, T) is chosen per client
on validation (the spec's distillation.selection_split).

    python benchmarks/accuracy.py                                  # ds1 and ds3, seeds 0-2
    python benchmarks/accuracy.py --splits ds1 --seeds 0
    python benchmarks/accuracy.py --federation "" --federation rounds=100,lr=0.2 \\
        --out accuracy.md                                          # two settings, one report

--threads (default 1) sets torch's CPU threads; --workdir keeps the stages' outputs. Text below
the notes marker of an existing --out file is kept when the report is regenerated.

Algorithms run with their defaults from pflpipe/spec/algorithms/<name>_params.py, which take lr,
batch size, local epochs and rounds from the federation section. `fedavg_2r` is a control: FedAvg
run for twice the rounds, the budget a federated personalization entry gets on top of its warm
start.
"""

import argparse
import collections
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pflpipe.spec import Spec, read_spec
from pflpipe.stages import (
    distill_grid_search,
    partition_data,
    personalize,
    select_teachers,
    train_local,
    warm_start_fedavg,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO / "specs" / "persfl-digits.yaml"
SPLITS = {"ds1": {"strategy": "ds1", "classes_per_client": 4},
          "ds3": {"strategy": "ds3", "classes_per_client": 2}}
# (label, spec entry); labels are the rows of the table.
ENTRIES = [
    ("fedavg_ft", {"name": "fedavg_ft"}),
    ("fedper", {"name": "fedper"}),
    ("ditto", {"name": "ditto"}),
    ("apfl", {"name": "apfl"}),
    ("apfl_adaptive", {"name": "apfl", "label": "apfl_adaptive", "adaptive": True}),
    ("pfedme", {"name": "pfedme"}),
    ("per_fedavg", {"name": "per_fedavg"}),
    ("per_fedavg_hf", {"name": "per_fedavg", "label": "per_fedavg_hf",
                       "variant": "hessian_free"}),
    ("persfl", {"name": "persfl"}),
]
BASELINES = ("fedavg", "fedavg_2r", "local")
CONTROLS = ("fedavg", "fedavg_2r")   # not personalized: no "beats FedAvg" verdict
NOTES_MARKER = "<!-- hand-written notes: what follows is kept when the file is regenerated -->"


@dataclass
class Outcome:
    """Everything one setting of the federation produced over splits and seeds."""

    label: str
    accuracy: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # split→model→[seed]
    chosen: dict[str, dict[int, tuple[dict, ...]]] = field(default_factory=dict)  # split→seed→rows
    last_round: dict[str, dict[int, int]] = field(default_factory=dict)          # split→seed→round
    seconds: dict[str, dict[int, float]] = field(default_factory=dict)           # split→seed→s
    test_sizes: dict[str, list[int]] = field(default_factory=dict)   # split→client test sizes
    model_seconds: dict[str, float] = field(default_factory=dict)
    specs: dict[str, Spec] = field(default_factory=dict)                          # split→spec


def build_spec(base: Spec, split: str, root: Path, overrides: dict) -> Spec:
    """The base spec with the benchmark's partition, entries, storage and federation overrides."""
    data = base.model_dump(mode="json", by_alias=True, exclude={"resources"})
    data["experiment"] = {"name": f"accuracy-{split}", "output_dir": str(root)}
    data["partition"] = {**SPLITS[split], "n_clients": base.partition.n_clients}
    data["federation"] = {**data["federation"], **overrides}
    data["personalization"] = [entry for _, entry in ENTRIES]
    data["tracking"] = {"enabled": False}
    data["storage"] = {"kind": "local", "path": str(root / "store")}
    data["engine"] = {**data["engine"], "device": "cpu"}
    return Spec.model_validate(data)


def run_seed(spec: Spec, seed: int, root: Path, timings: dict[str, float]
             ) -> tuple[dict[str, float], tuple[dict, ...], int]:
    """Every model's mean client test accuracy (best-on-validation) for one split and seed, the
    (λ, T) PersFL chose per client and the warm start's last round."""
    out: dict[str, float] = {}

    def timed(name, fn):
        start = time.perf_counter()
        result = fn()
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        return result

    partition, checkpoints = root / "partition", root / "checkpoints"
    timed("partition_data", lambda: partition_data.run(spec, seed, partition))
    warm = timed("fedavg", lambda: warm_start_fedavg.run(spec, seed, partition, checkpoints,
                                                         root / "fedavg"))
    out["fedavg"] = warm.best_test_accuracy
    long_spec = spec.model_copy(update={"federation": spec.federation.model_copy(
        update={"rounds": 2 * spec.federation.rounds})})
    long = timed("fedavg_2r", lambda: warm_start_fedavg.run(
        long_spec, seed, partition, root / "checkpoints_2r", root / "fedavg_2r"))
    out["fedavg_2r"] = long.best_test_accuracy
    out["local"] = timed("local", lambda: train_local.run(
        spec, seed, partition, root / "local")).best_val_test_accuracy
    for label, _ in ENTRIES:
        if label == "persfl":
            continue
        result = timed(label, lambda label=label: personalize.run(
            spec, seed, label, partition, checkpoints, root / label))
        out[label] = result.best_val_test_accuracy
    timed("persfl", lambda: select_teachers.run(spec, checkpoints, root / "teachers"))
    distilled = timed("persfl", lambda: distill_grid_search.run(
        spec, seed, partition, checkpoints, root / "teachers", root / "persfl"))
    out["persfl"] = distilled.test_accuracy
    return out, distilled.chosen, warm.rounds_completed


def run_setting(base: Spec, label: str, overrides: dict, splits, seeds, root: Path) -> Outcome:
    """Run every split and seed under one federation setting."""
    outcome = Outcome(label)
    for split in splits:
        spec = build_spec(base, split, root / label / split, overrides)
        outcome.specs[split] = spec
        for name in ("accuracy", "chosen", "last_round", "seconds"):
            getattr(outcome, name)[split] = {}
        for seed in seeds:
            start = time.perf_counter()
            accs, chosen, last = run_seed(spec, seed, root / label / split / str(seed),
                                          outcome.model_seconds)
            outcome.seconds[split][seed] = time.perf_counter() - start
            outcome.chosen[split][seed], outcome.last_round[split][seed] = chosen, last
            manifest = json.loads((root / label / split / str(seed) / "partition"
                                   / "manifest.json").read_text())
            outcome.test_sizes.setdefault(split, []).extend(
                client["n"]["test"] for client in manifest["clients"])
            for model, acc in accs.items():
                outcome.accuracy[split].setdefault(model, []).append(acc)
            print(f"[{label}] {split} seed {seed} ({outcome.seconds[split][seed]:.0f} s): "
                  + ", ".join(f"{m} {100 * a:.2f}" for m, a in accs.items()), flush=True)
    return outcome


# ---- tables -------------------------------------------------------------------------------------
def accuracy_table(outcome: Outcome) -> str:
    """Mean ± std over seeds per model and split, and per-seed wins over FedAvg."""
    splits = list(outcome.accuracy)
    lines = ["| model | " + " | ".join(f"{s} acc % (mean ± std) | {s} > FedAvg (seeds)"
                                       for s in splits) + " |",
             "|---|" + "---:|---:|" * len(splits)]
    for model in (*BASELINES, *(label for label, _ in ENTRIES)):
        cells = []
        for split in splits:
            values, fedavg = outcome.accuracy[split][model], outcome.accuracy[split]["fedavg"]
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            wins = sum(v > f for v, f in zip(values, fedavg, strict=True))
            cells += [f"{100 * statistics.mean(values):.2f} ± {100 * std:.2f}",
                      "—" if model == "fedavg" else f"{wins}/{len(values)}"]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_table(outcome: Outcome) -> str:
    """Every model's accuracy per split and seed."""
    columns = [(split, seed) for split in outcome.accuracy for seed in outcome.seconds[split]]
    lines = ["| model | " + " | ".join(f"{s} seed {seed}" for s, seed in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for model in (*BASELINES, *(label for label, _ in ENTRIES)):
        cells = [f"{100 * outcome.accuracy[s][model][i]:.2f}"
                 for s, seed in columns for i in [list(outcome.seconds[s]).index(seed)]]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(outcome: Outcome) -> str:
    """Issue 6's criterion: every personalized model's mean beats FedAvg's, per split."""
    lines = []
    for split, accs in outcome.accuracy.items():
        fedavg = statistics.mean(accs["fedavg"])
        losers = [m for m in accs if m not in CONTROLS and statistics.mean(accs[m]) <= fedavg]
        lines.append(f"- {split}: FedAvg {100 * fedavg:.2f} %; " + (
            "every personalized model's mean is above it." if not losers else
            "not above it: " + ", ".join(f"{m} ({100 * statistics.mean(accs[m]):.2f} %)"
                                         for m in losers) + "."))
    return "\n".join(lines)


def _pair(row: dict) -> str:
    """λ = 0 ignores the teacher, so T is meaningless there (ties go to the first T)."""
    return "λ=0 (T unused)" if row["lam"] == 0 else f"λ={row['lam']:g}, T={row['temperature']:g}"


def _key(row: dict) -> tuple[float, float]:
    """(λ, T) with T = 0 where λ = 0, so the λ = 0 students count as one choice."""
    return (row["lam"], 0.0 if row["lam"] == 0 else row["temperature"])


def chosen_table(chosen: tuple[dict, ...]) -> str:
    """Per-client teacher round and chosen (λ, T) for one split and seed."""
    lines = ["| client | teacher round | λ | T | val acc | test acc |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {c['client']} | {c['teacher_round']} | {c['lam']:g} | "
              f"{'—' if c['lam'] == 0 else format(c['temperature'], 'g')} | "
              f"{100 * c['val_accuracy']:.2f} | {100 * c['test_accuracy']:.2f} |" for c in chosen]
    return "\n".join(lines)


def frequency_table(outcome: Outcome) -> str:
    """How often each (λ, T) was chosen over clients and seeds, per split."""
    splits = list(outcome.chosen)
    counts = {s: collections.Counter(_key(c) for rows in outcome.chosen[s].values() for c in rows)
              for s in splits}
    totals = {s: sum(counts[s].values()) for s in splits}
    keys = sorted({key for s in splits for key in counts[s]})
    lines = ["| (λ, T) | " + " | ".join(f"{s} (of {totals[s]})" for s in splits) + " |",
             "|---|" + "---:|" * len(splits)]
    lines += [f"| {_pair({'lam': lam, 'temperature': t})} | "
              + " | ".join(str(counts[s][(lam, t)]) for s in splits) + " |" for lam, t in keys]
    return "\n".join(lines)


def teacher_summary(outcome: Outcome) -> str:
    """How many teachers are the warm start's last round (an optimal-teacher search that always
    lands on the last round says FedAvg was still improving when it stopped)."""
    parts = []
    for split, by_seed in outcome.chosen.items():
        last = sum(c["teacher_round"] == outcome.last_round[split][seed]
                   for seed, rows in by_seed.items() for c in rows)
        total = sum(len(rows) for rows in by_seed.values())
        rounds = sorted({c["teacher_round"] for rows in by_seed.values() for c in rows})
        parts.append(f"{split}: {last}/{total} client teachers are the last round "
                     f"(rounds chosen: {', '.join(map(str, rounds))})")
    return "; ".join(parts) + "."


def settings_text(outcome: Outcome) -> str:
    """The resolved spec settings every model of this setting ran with."""
    spec = next(iter(outcome.specs.values()))
    fed = spec.federation.model_dump(mode="json")
    lines = [f"- federation: {_kv(fed)}",
             f"- model: {_kv(spec.model.model_dump(mode='json'))}",
             f"- teachers: {_kv(spec.teachers.model_dump(mode='json'))}",
             f"- distillation: {_kv(spec.distillation.model_dump(mode='json'))}",
             f"- local baseline: {_kv(spec.local_params.model_dump(mode='json'))}"]
    lines += [f"- partition {split}: {_kv(s.partition.model_dump(mode='json'))}"
              for split, s in outcome.specs.items()]
    lines.append("- personalization entries (defaults resolved; lr, batch_size, rounds and "
                 "local_epochs `None` mean the federation's):")
    lines += [f"  - {_kv(entry.model_dump(mode='json'))}" for entry in spec.personalization]
    return "\n".join(lines)


def _kv(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def sizes_text(outcome: Outcome) -> str:
    """Client test-set sizes: how coarse one client's accuracy is."""
    return "Test images per client (over seeds): " + "; ".join(
        f"{split} {min(sizes)}-{max(sizes)} (median {statistics.median(sizes):g})"
        for split, sizes in outcome.test_sizes.items()) + "."


def runtime_text(outcome: Outcome) -> str:
    per_seed = "; ".join(f"{split} seed {seed}: {sec:.0f} s" for split, by_seed in
                         outcome.seconds.items() for seed, sec in by_seed.items())
    per_model = ", ".join(f"{k} {v:.1f}" for k, v in outcome.model_seconds.items())
    return f"Wall time per seed: {per_seed}. Seconds per model (all splits and seeds): {per_model}."


def section(outcome: Outcome, overrides: dict, base_path: Path) -> str:
    """The Markdown section of one federation setting."""
    title = ("the quickstart spec's federation" if not overrides
             else f"federation overrides {_kv(overrides)}")
    shown = base_path.relative_to(REPO) if base_path.is_relative_to(REPO) else base_path
    parts = [f"## Setting `{outcome.label}`: {title}", "",
             f"Spec: `{shown}` with the benchmark's partitions and entries.", "",
             settings_text(outcome), "",
             "### Mean client test accuracy (%), mean ± std over seeds", "",
             accuracy_table(outcome), "", verdict(outcome), "",
             "### Per seed (%)", "", per_seed_table(outcome), ""]
    if "ds1" in outcome.chosen and outcome.chosen["ds1"]:
        seed = min(outcome.chosen["ds1"])
        parts += [f"### PersFL: chosen (λ, T) per client, ds1 seed {seed}", "",
                  chosen_table(outcome.chosen["ds1"][seed]), ""]
    parts += ["### PersFL: how often each (λ, T) was chosen (clients × seeds)", "",
              frequency_table(outcome), "", teacher_summary(outcome), "",
              sizes_text(outcome), runtime_text(outcome), ""]
    return "\n".join(parts)


def source_version() -> str:
    """HEAD's short hash, marked when pflpipe/ has uncommitted changes (taken at the start)."""
    try:
        git = ["git", "-C", str(REPO)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "pflpipe"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {commit}" + (" with uncommitted changes in pflpipe/" if dirty else "")


def write_markdown(path: Path, command: str, version: str, sections: list[str], seeds) -> None:
    """Write the report, keeping any hand-written notes below NOTES_MARKER."""
    notes = ""
    if path.is_file() and NOTES_MARKER in path.read_text():
        notes = path.read_text().split(NOTES_MARKER, 1)[1]
    head = ["# Accuracy of the personalization algorithms on digits", "",
            "Generated by `benchmarks/accuracy.py` at "
            f"{version}, torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s):",
            "", "```", command, "```", "",
            "Dataset: scikit-learn's 8×8 digits (1,797 images), 60/20/20 train/val/test per "
            f"client; seeds {', '.join(map(str, seeds))}. Each cell is the unweighted mean over "
            "clients of the test accuracy of each client's model chosen on its validation "
            "split, then mean ± std over seeds; \"> FedAvg (seeds)\" counts the seeds on which "
            "the model beat FedAvg. The test splits are small (see each setting's test sizes), "
            "so differences of 1-2 points are within noise.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head + sections) + "\n" + NOTES_MARKER + (notes or "\n"))


def parse_overrides(text: str) -> dict:
    """'rounds=100,lr=0.2' → {'rounds': 100, 'lr': 0.2}; '' → {} (the spec's federation)."""
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = _number(value.strip())
    return out


def _number(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC,
                        help="base spec whose federation/model/distillation settings are used")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--federation", action="append", type=parse_overrides, metavar="K=V,...",
                        help="federation overrides, e.g. rounds=100,lr=0.2; repeat for several "
                        "settings ('' = the spec's own); default: the spec's own only")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where stage outputs go (a temporary directory when omitted)")
    parser.add_argument("--out", type=Path, default=None, help="write a Markdown report here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    version = source_version()
    base = read_spec(args.spec)
    settings = args.federation or [{}]
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        for overrides in settings:
            label = "quickstart" if not overrides else "-".join(f"{k}{v}" for k, v in
                                                               overrides.items())
            outcomes.append(run_setting(base, label, overrides, args.splits, args.seeds, root))
    for outcome in outcomes:
        print(f"\n{sizes_text(outcome)}")
        print(f"\n[{outcome.label}] mean client test accuracy (%) of each client's "
              "best-on-validation model\n")
        print(accuracy_table(outcome))
        print(verdict(outcome))
        print(f"\nPersFL (λ, T) chosen:\n{frequency_table(outcome)}\n{teacher_summary(outcome)}")
        print(runtime_text(outcome))
    if args.out:
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
        command = "python " + " ".join(shlex.quote(str(a)) for a in [shown, *sys.argv[1:]])
        write_markdown(args.out, command, version, [section(o, s, args.spec.resolve())
                                           for o, s in zip(outcomes, settings, strict=True)],
                       args.seeds)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
