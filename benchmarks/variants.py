"""Hyper-parameter variants and seeds as members, against separate runs, on digits.

    nice python benchmarks/variants.py [--seeds 3] [--lams 0.01 0.1 1.0] [--rounds 10]
                                       [--clients 10]

Ditto at each λ of `--lams` on each seed (a spec's entries that differ in λ, or a tuning grid's
points), three ways, in one process, from the same warm starts:

- separate: each (λ, seed) alone (`personalize.run`: the seeds loop without the switch);
- seeds as members: each λ with its seeds as members (`personalize.run_members`: what
  `engine.seeds_as_members` did before variants were grouped);
- variants as members: every (λ, seed) a member of one federation (`personalize.run_variants`).

All three write the same files, byte for byte (checked here, and in tests/engine/test_variants.py).
Prints wall and CPU seconds (process CPU, every thread) of each and the ratios.
"""

import argparse
import filecmp
import tempfile
import time
from pathlib import Path

from pflpipe.spec import parse_spec
from pflpipe.stages import partition_data, personalize
from pflpipe.stages import warm_start_fedavg as warm_start

SPEC = """\
experiment: {{name: variants-bench, output_dir: {out}, seeds: {seeds}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: {clients}, classes_per_client: 4}}
federation: {{rounds: 2}}
engine: {{compile: false}}
personalization:
{entries}
"""


def timed(fn) -> tuple[float, float]:
    """Wall and CPU seconds of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def same_files(a: Path, b: Path) -> bool:
    """Whether the two directories hold the same files, byte for byte."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
        filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def main() -> None:
    """Time the three ways; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lams", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="variants-bench-"))
    seeds = list(range(args.seeds))
    labels = [f"ditto-{i}" for i in range(len(args.lams))]
    entries = "\n".join(f"  - {{name: ditto, label: {label}, lam: {lam}, rounds: {args.rounds}}}"
                        for label, lam in zip(labels, args.lams, strict=True))
    spec = parse_spec(SPEC.format(out=out, seeds=seeds, clients=args.clients, entries=entries))
    parts = [out / f"partition{s}" for s in seeds]
    checkpoints = [out / f"checkpoints{s}" for s in seeds]
    for seed, part, ck in zip(seeds, parts, checkpoints, strict=True):
        partition_data.run(spec, seed, part)
        warm_start.run(spec, seed, part, ck, out / f"fedavg{seed}", resume="none")

    def separate():
        for label in labels:
            for seed, part, ck in zip(seeds, parts, checkpoints, strict=True):
                personalize.run(spec, seed, label, part, ck, out / f"separate/{label}{seed}",
                                resume="none")

    def seeds_only():
        for label in labels:
            personalize.run_members(spec, seeds, label, parts, checkpoints,
                                    [out / f"seeds/{label}{s}" for s in seeds], resume="none")

    def variants():
        personalize.run_variants([(spec, label) for label in labels], seeds, parts, checkpoints,
                                 [[out / f"variants/{label}{s}" for s in seeds]
                                  for label in labels], resume="none")

    times = {name: timed(fn) for name, fn in (("separate", separate),
                                              ("seeds as members", seeds_only),
                                              ("variants as members", variants))}
    same = all(same_files(out / f"separate/{label}{s}", out / f"{way}/{label}{s}")
               for label in labels for s in seeds for way in ("seeds", "variants"))
    runs = len(labels) * len(seeds)
    print(f"Ditto, {len(labels)} λ × {len(seeds)} seeds = {runs} runs, {args.clients} clients, "
          f"{args.rounds} rounds, digits; identical files: {same}")
    print("| way | wall s | CPU s | wall ratio | CPU ratio |")
    print("|---|---:|---:|---:|---:|")
    base_wall, base_cpu = times["separate"]
    for name, (wall, cpu) in times.items():
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {base_wall / wall:.2f}× | "
              f"{base_cpu / cpu:.2f}× |")


if __name__ == "__main__":
    main()
