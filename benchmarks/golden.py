"""Golden check: the quickstart and one spec per algorithm family give byte-identical files.

Runs ``pflpipe run --fresh`` on short versions of the quickstart and of the Flow, pFedVEM and
Self-FL specs (rounds cut with ``--set``), hashes every seed's ``results.csv`` and every model
file (``<model>/models/*.pt``), and writes the hashes as JSON. Run it on two commits and compare:

    python benchmarks/golden.py record OUT.json [--work DIR]
    python benchmarks/golden.py compare BEFORE.json AFTER.json

`compare` prints every file whose hash differs (or that exists on one side only) and exits 1 if
any does. MLflow tracks into a sqlite file under the work directory.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Each family's spec and the overrides that make it short (a few CPU minutes in all).
CASES = {
    "quickstart": ("specs/persfl-digits.yaml",
                   ["federation.rounds=8", "distillation.epochs=2"]),
    "flow": ("specs/flow-digits.yaml",
             ["federation.rounds=4", "partition.n_clients=20", "federation.full_eval_every=2"]),
    "pfedvem": ("specs/pfedvem-digits.yaml",
                ["experiment.seeds=[0]", "federation.rounds=4", "partition.n_clients=20"]),
    "selffl": ("specs/selffl-digits.yaml",
               ["experiment.seeds=[0]", "federation.rounds=4"]),
}


def record(out: Path, work: Path, cases: list[str]) -> dict[str, str]:
    """Run every case under `work` and return {file: sha256} over their results and models."""
    hashes = {}
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    for name in cases:
        spec, overrides = CASES[name]
        results = work / name
        command = [str(Path(sys.executable).with_name("pflpipe")), "run", str(ROOT / spec),
                   "--fresh", "--results", str(results), *(f"--set={o}" for o in overrides)]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=env, cwd=work)
        latest = (results / "latest").resolve()
        for path in sorted(latest.glob("seed-*/results.csv")) + sorted(
                latest.glob("seed-*/*/models/*.pt")):
            hashes[f"{name}/{path.relative_to(latest)}"] = hashlib.sha256(
                path.read_bytes()).hexdigest()
    out.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    print(f"{len(hashes)} files hashed into {out}")
    return hashes


def compare(before: Path, after: Path) -> int:
    """Print the files whose hashes differ; return 1 if any does, else 0."""
    old, new = (json.loads(p.read_text()) for p in (before, after))
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for key in differ:
        print(f"differs: {key}  {old.get(key, 'missing')[:12]} → {new.get(key, 'missing')[:12]}")
    print(f"{len(old.keys() & new.keys()) - len(set(differ) & old.keys() & new.keys())} of "
          f"{len(old.keys() | new.keys())} files byte-identical")
    return 1 if differ else 0


def main() -> int:
    """Parse the command line and run `record` or `compare`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    rec = verbs.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--work", type=Path, help="where the runs go (default: a temporary dir)")
    rec.add_argument("--case", action="append", choices=sorted(CASES))
    cmp = verbs.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.verb == "compare":
        return compare(args.before, args.after)
    work = args.work or Path(tempfile.mkdtemp(prefix="pflpipe-golden-"))
    work.mkdir(parents=True, exist_ok=True)
    record(args.out.absolute(), work.absolute(), args.case or list(CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
