"""Regenerate the generated blocks of docs/results.md or docs/performance.md from their commands.

A page is hand-written prose with generated blocks between markers:

    <!-- pages: NAME begin -->
    ... written by this script ...
    <!-- pages: NAME end -->

Each block comes from one source (`RESULTS` and `PERFORMANCE` below list them): a result spec,
run by benchmarks/results_run.py and tabled by benchmarks/results_tables.py, or a benchmark whose
printed output goes into the page as it is. A block names what produced its numbers: the
command, the commit it ran at, the machine and how long it took. Nothing outside the markers is
touched, so a rerun never clobbers the prose around the tables.

    python benchmarks/pages.py results                        # every table (hours on 2 cores)
    python benchmarks/pages.py results --only results-digits  # one table
    python benchmarks/pages.py performance --only skew
    python benchmarks/pages.py results --render               # rewrite the blocks, run nothing
    python benchmarks/pages.py results --report               # remake the kept runs' reports
    python benchmarks/pages.py results --quick --runs DIR --out PAGE   # cut-down (the tests)

Each source runs into its own folder under --runs (default results/pages/<page>/); a folder
holding a finished run is reused (--rerun runs it again from scratch; an unfinished one resumes
from the stages it kept). --report runs only evaluate_fairness again over a kept result run's
seeds (today's report code, nothing retrained; minutes) and the block names that commit too.
--quick runs each source at a cut-down
setting (a few rounds, one seed): the page's structure, not its numbers. Run it niced
(`nice -n 15`) on a shared machine.
"""

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import results_tables  # noqa: E402  (a sibling script, not a package)

from pflpipe.events import TAG  # noqa: E402
from pflpipe.markdown import replace_section  # noqa: E402

PROVENANCE = "provenance.json"
OUTPUT = "output.md"
CODE = ("pflpipe", "components", "pipelines", "specs", "benchmarks")
TIED = {"experiment.seeds", "tuning.seeds"}  # overrides the quick setting gives as lists


def markers(name: str) -> tuple[str, str]:
    return f"<!-- pages: {name} begin -->", f"<!-- pages: {name} end -->"


@dataclass(frozen=True)
class Spec:
    """A result spec: its pipeline in one process, then its table from the run folder."""

    name: str
    spec: str
    quick: tuple[str, ...] = ()  # --set overrides of the cut-down run

    def argv(self, run: Path, quick: bool) -> list[str]:
        sets = [arg for item in (self.quick if quick else ()) for arg in ("--set", item)]
        return ["benchmarks/results_run.py", self.spec, str(run), *sets]

    def finished(self, run: Path) -> bool:
        return (run / "report").is_dir() and (run / PROVENANCE).is_file()

    def body(self, run: Path, made: dict) -> str:
        return results_tables.section(REPO / self.spec, run, made["commit"], standalone=False)


@dataclass(frozen=True)
class Command:
    """A benchmark whose printed output is the block (in a code block when it is plain text)."""

    name: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...] = ()
    fence: bool = False  # plain-text output: keep its columns in a code block
    about: str = ""  # what the output's numbers are, for the reader

    workdir: bool = False  # the benchmark keeps its stages' outputs in --workdir (resumes)
    env: tuple[tuple[str, str], ...] = ()  # environment the command runs with (shown with it)
    manual: bool = False  # hours: run only when named in --only, else its kept block stays

    def argv(self, run: Path, quick: bool) -> list[str]:
        work = ["--workdir", str(run / "work")] if self.workdir else []
        return [*(self.quick_args if quick else self.args), *work]

    def finished(self, run: Path) -> bool:
        return (run / OUTPUT).is_file() and (run / PROVENANCE).is_file()

    def body(self, run: Path, made: dict) -> str:
        text = "\n".join(line for line in (run / OUTPUT).read_text().strip("\n").splitlines()
                         if not line.strip().startswith(TAG))  # a stage's events, not its output
        if self.fence:
            text = f"```\n{text}\n```"
        return "\n".join(filter(None, [self.about, text]))


@dataclass(frozen=True)
class Page:
    path: str
    sources: tuple = field(default=())


RESULTS = Page("docs/results.md", (
    Spec("results-digits", "specs/results-digits.yaml", quick=(
        "federation.rounds=2", "experiment.seeds=[0]", "tuning.seeds=[100]",
        "distillation.epochs=1", "partition.n_clients=4")),
    Spec("results-pfedvem-digits", "specs/results-pfedvem-digits.yaml", quick=(
        "federation.rounds=2", "experiment.seeds=[1]", "tuning.seeds=[100]",
        "tuning.budget.rounds=2", "partition.n_clients=6", "federation.local_epochs=1")),
    Spec("results-selffl-digits", "specs/results-selffl-digits.yaml", quick=(
        "federation.rounds=3", "experiment.seeds=[1]", "tuning.seeds=[100]",
        "partition.n_clients=4")),
    Command("selffl-ablations", ("benchmarks/selffl_digits.py", "--seeds", "1", "2", "3",
                                 "--rounds", "30"),
            quick_args=("benchmarks/selffl_digits.py", "--seeds", "1", "--rounds", "2", "--only",
                        "self_fl", "only_init"), workdir=True),
    Command("selffl-synthetic", (
        "benchmarks/selffl_synthetic.py", "--repetitions", "10", "--fractions", "0.1", "0.5", "1"),
        quick_args=("benchmarks/selffl_synthetic.py", "--repetitions", "3",
                    "--references-only")),
    Command("flow-digits", (
        "benchmarks/flow_digits.py", "--seeds", "0", "1", "2", "--only", "fedavg_ft", "flow",
        "--set", "partition.n_clients=20", "--set", "federation.rounds=60",
        "--set", "federation.client_fraction=0.5", "--set", "federation.full_eval_every=20"),
        quick_args=("benchmarks/flow_digits.py", "--seeds", "0", "--only", "flow", "--set",
                    "partition.n_clients=10", "--set", "federation.rounds=2", "--set",
                    "federation.full_eval_every=1"), workdir=True),
))

ONE_COMPILE_THREAD = (("TORCHINDUCTOR_COMPILE_THREADS", "1"),)  # compiling counted as CPU
PERFORMANCE = Page("docs/performance.md", (
    Command("engine-cpu", ("benchmarks/engine.py", "--clients", "10", "100", "1000", "--rounds",
                           "2", "--threads", "1", "--clock", "cpu"),
            quick_args=("benchmarks/engine.py", "--clients", "4", "--rounds", "1", "--threads",
                        "1", "--clock", "cpu", "--no-compile"),
            fence=True, env=ONE_COMPILE_THREAD),
    Command("step-profile", ("benchmarks/step_profile.py",),
            quick_args=("benchmarks/step_profile.py", "--members", "4"), fence=True),
    Command("skew", ("benchmarks/skew.py", "--rounds", "3", "--repeats", "2", "--threads", "1",
                     "--clock", "cpu"),
            quick_args=("benchmarks/skew.py", "--rounds", "1", "--repeats", "1", "--trainers",
                        "plain", "batched", "--threads", "1", "--clock", "cpu"),
            fence=True, env=ONE_COMPILE_THREAD),
    Command("startup", ("benchmarks/startup.py", "--base", "1f2e09b", "--rerun"),
            quick_args=("benchmarks/startup.py", "--set", "federation.rounds=2", "--rerun"),
            fence=True),
    Command("checkpoints", ("benchmarks/checkpoints.py",),
            quick_args=("benchmarks/checkpoints.py", "--rounds", "3", "--clients", "4"),
            fence=True),
    Command("precision", ("benchmarks/precision.py",),
            quick_args=("benchmarks/precision.py", "--seeds", "0", "--rounds", "2"), fence=True),
    Command("distill", ("benchmarks/distill.py",),
            quick_args=("benchmarks/distill.py", "--epochs", "1"), fence=True),
    Command("pfedme", ("benchmarks/pfedme.py",),
            quick_args=("benchmarks/pfedme.py", "--clients", "4", "--repeat", "1"), fence=True),
    Command("variants", ("benchmarks/variants.py",),
            quick_args=("benchmarks/variants.py", "--seeds", "1", "--lams", "0.1", "1.0",
                        "--rounds", "1", "--clients", "4"), fence=True),
    Command("protocol", ("benchmarks/protocol.py", "--splits", "ds1", "--pool", "17500",
                         "--rounds", "10", "--epochs", "1", "--compile", "false"),
            quick_args=("benchmarks/protocol.py", "--splits", "ds1", "--seeds", "1", "--pool",
                        "700", "--rounds", "1", "--epochs", "1", "--compile", "false",
                        "--no-tracking"), manual=True),
    Command("cross-device", ("benchmarks/cross_device.py", "--rounds", "6"),
            quick_args=("benchmarks/cross_device.py", "--rounds", "2"), fence=True),
))

PAGES = {"results": RESULTS, "performance": PERFORMANCE}


def machine() -> str:
    """The CPU model, its cores, the accelerator and torch: what a reader needs to compare."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(x.split(":", 1)[1].strip() for x in lines if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    device = (f"{torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no GPU")
    return f"{os.cpu_count()} cores of an {model}, {device}, torch {torch.__version__}"


def commit() -> str:
    """HEAD's short hash, marked when the code a run depends on differs from it."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", *CODE],
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"{head} with uncommitted changes" if dirty else head


def run(source, folder: Path, quick: bool) -> dict:
    """Run one source into `folder`; write and return its provenance."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = source.argv(folder, quick)
    env = dict(getattr(source, "env", ()))
    shown = " ".join([*(f"{k}={v}" for k, v in env.items()), "python",
                      *(shlex.quote(a) for a in argv)])
    shown = shown.replace(shlex.quote(str(folder)), "RUN_DIR")
    made = {"command": shown, "commit": commit(), "machine": machine(),
            "load": [round(os.getloadavg()[0], 1)]}
    print(f"{source.name}: {shown}", file=sys.stderr, flush=True)
    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, *argv], cwd=REPO, check=False, env=os.environ | env,
                         stdout=subprocess.PIPE if isinstance(source, Command) else None,
                         text=True)
    if out.returncode:
        raise SystemExit(f"{source.name}: {shown} failed (exit {out.returncode})")
    if isinstance(source, Command):
        (folder / OUTPUT).write_text(out.stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    made["seconds"] = round(time.perf_counter() - start, 1)
    made["cpu_seconds"] = round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1)
    made["load"].append(round(os.getloadavg()[0], 1))
    (folder / PROVENANCE).write_text(json.dumps(made, indent=1) + "\n")
    return made


def remake_report(source, folder: Path, quick: bool) -> None:
    """evaluate_fairness again over a kept run's seeds; its command and commit join the run's."""
    argv = [*source.argv(folder, quick), "--part", "report"]
    shown = " ".join(["python", *map(shlex.quote, argv)]).replace(shlex.quote(str(folder)),
                                                                  "RUN_DIR")
    print(f"{source.name}: {shown}", file=sys.stderr, flush=True)
    if subprocess.run([sys.executable, *argv], cwd=REPO, check=False).returncode:
        raise SystemExit(f"{source.name}: {shown} failed")
    made = json.loads((folder / PROVENANCE).read_text())
    made["report"] = {"command": shown, "commit": commit()}
    (folder / PROVENANCE).write_text(json.dumps(made, indent=1) + "\n")


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{seconds:.0f} s" if seconds < 120 else (
        f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min")


def block(source, folder: Path, made: dict) -> str:
    """The generated block: where its numbers come from, then the source's own body."""
    begin, end = markers(source.name)
    remade = made.get("report")
    report = (f" (its report remade by `{remade['command']}` at commit {remade['commit']})"
              if remade else "")
    head = (f"*Generated by `python benchmarks/pages.py {page_of(source)} --only {source.name}`:"
            f" `{made['command']}` ran at commit {made['commit']}{report} on {made['machine']}, "
            f"in {duration(made['seconds'])} ({duration(made['cpu_seconds'])} of CPU; load "
            f"average {made['load'][0]} → {made['load'][-1]}).*")
    return "\n".join([begin, head, "", source.body(folder, made), end])


def page_of(source) -> str:
    return next(name for name, page in PAGES.items() if source in page.sources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", choices=sorted(PAGES))
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these sources only")
    parser.add_argument("--runs", type=Path, help="run folders (default results/pages/PAGE)")
    parser.add_argument("--out", type=Path, help="the page to write (default: the page itself)")
    parser.add_argument("--render", action="store_true", help="rewrite the blocks, run nothing")
    parser.add_argument("--report", action="store_true",
                        help="remake the kept result runs' reports (evaluate_fairness only)")
    parser.add_argument("--rerun", action="store_true", help="rerun finished sources too")
    parser.add_argument("--quick", action="store_true", help="a cut-down run of every source")
    args = parser.parse_args()
    page = PAGES[args.page]
    names = [s.name for s in page.sources]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f"--only: no source {', '.join(unknown)} (sources: {', '.join(names)})")
    runs = args.runs or REPO / "results" / "pages" / args.page
    out = args.out or REPO / page.path
    for source in page.sources:
        if args.only and source.name not in args.only:
            continue
        folder = runs / source.name
        named = source.name in (args.only or ())
        if getattr(source, "manual", False) and not named and not source.finished(folder):
            continue  # recorded by hand in the page until someone runs it by name
        if not (args.render or args.report) and (args.rerun or not source.finished(folder)):
            if args.rerun:  # from scratch: a block's commit and time describe a whole run
                shutil.rmtree(folder / "work", ignore_errors=True)
            run(source, folder, args.quick)
        if args.report and isinstance(source, Spec) and source.finished(folder):
            remake_report(source, folder, args.quick)
        if not source.finished(folder):
            print(f"{source.name}: no finished run in {folder}; its block is left as it is",
                  file=sys.stderr)
            continue
        made = json.loads((folder / PROVENANCE).read_text())
        begin, end = markers(source.name)
        replace_section(out, block(source, folder, made), begin, end)
        print(f"{source.name}: {duration(made['seconds'])}, written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
