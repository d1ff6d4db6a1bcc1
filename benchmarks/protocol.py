"""The thesis's MNIST protocol, seeds as members against per-seed execution, on an MNIST-sized pool.

    python benchmarks/protocol.py [--scale full|small|tiny] [--splits ds1,ds2,ds3]
                                  [--stages-only | --e2e-only] [--device cpu|cuda]

The pool is MNIST-sized and synthetic: 70,000 samples of 784 features, labels learnable by a
linear model (the Synthetic-IID recipe of `pflpipe.data.synthetic`: one shared W, b, features
x ~ N(0, Σ) with Σ_jj = j^-1.2, y = argmax(Wᵀx + b)), written once as an `arrays` dataset.
Each split (ds1, ds2, ds3 over 10 clients, 60/20/20) runs the thesis's protocol for every seed:
FedAvg, the local baseline, PersFL's 30-point λ × T distillation grid, FedPer, pFedMe and
Per-FedAvg (specs/persfl-mnist-ds*.yaml's settings), twice in the same run:

- stage by stage in this process: each training stage for every seed one after another (today's
  per-seed execution) and with the seeds as members of one federation
  (`pflpipe.stages.train_members`; select_teachers and the distillation grid run per seed in
  both), timing each stage;
- end to end through `pflpipe run` (kfp.local, --fresh), with `engine.seeds_as_members` off and
  on.

It prints one table, per split and stage: per-seed seconds, members seconds, their ratio.
Scales: full (the protocol: 70,000 samples, 5 seeds, FedAvg 100 rounds, distillation 10 epochs;
hours on a CPU), small (7,000 samples, 5 seeds, 10 rounds, 2 epochs), tiny (3,500 samples,
3 seeds, 4 rounds, 1 epoch).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pflpipe.data.synthetic import synthetic
from pflpipe.spec import parse_spec

SCALES = {"full": dict(samples=70_000, seeds=5, rounds=100, epochs=10, personal_rounds=100),
          "small": dict(samples=7_000, seeds=5, rounds=10, epochs=2, personal_rounds=10),
          "tiny": dict(samples=3_500, seeds=3, rounds=4, epochs=1, personal_rounds=4)}
SPLITS = {"ds1": "strategy: ds1, classes_per_client: 4",
          "ds2": "strategy: ds2, alpha: 0.9",
          "ds3": "strategy: ds3, mu: 0.0, sigma: 2.0"}
SPEC = """\
experiment: {{name: protocol-{split}, output_dir: {out}, seeds: {seeds}}}
dataset: {{name: arrays, root: {root}, path: pool.npz}}
partition: {{n_clients: 10, {partition}}}
model: {{architecture: mlp}}
federation: {{rounds: {rounds}, local_epochs: 1, batch_size: 20, lr: 0.01}}
engine: {{device: {device}, seeds_as_members: {members}}}
personalization:
  - {{name: persfl}}
  - {{name: fedper, rounds: {personal_rounds}}}
  - {{name: pfedme, rounds: {personal_rounds}}}
  - {{name: per_fedavg, rounds: {personal_rounds}}}
distillation: {{epochs: {epochs}}}
tracking: {{enabled: false}}
"""


def write_pool(root: Path, samples: int) -> None:
    """The MNIST-sized pool: `samples` × 784 features, 10 learnable classes, as pool.npz."""
    clients = 70
    drawn = synthetic(clients, np.random.default_rng(0), iid=True, dimension=784, n_classes=10,
                      mean_samples=np.log(samples / clients - 49), sigma_samples=0.0,
                      min_samples=50)
    x = drawn.x[:samples].astype(np.float32)
    np.savez(root / "pool.npz", x=x, y=drawn.y[:samples])


def spec_text(split: str, scale: dict, out: Path, root: Path, device: str, members: bool) -> str:
    """The protocol's spec of one split."""
    return SPEC.format(split=split, out=out, seeds=list(range(scale["seeds"])), root=root,
                       partition=SPLITS[split], rounds=scale["rounds"], device=device,
                       members=str(members).lower(), epochs=scale["epochs"],
                       personal_rounds=scale["personal_rounds"])


def stages(text: str, out: Path, members: bool) -> dict[str, float]:
    """Seconds of each training stage for every seed: per seed, or the grouped ones as members."""
    from pflpipe.pipelines.cache import members_specs_json
    from pflpipe.spec import Spec
    from pflpipe.stages import (
        distill_grid_search,
        partition_data,
        personalize,
        select_teachers,
        train_local,
        train_members,
    )
    from pflpipe.stages import warm_start_fedavg as warm_start

    spec = parse_spec(text)
    seeds, times = spec.experiment.seeds, {}
    labels = [e.display_name for e in spec.personalization if e.stage == "personalize"]
    part, ck = (lambda s: out / f"seed-{s}/partition"), (lambda s: out / f"seed-{s}/checkpoints")
    start = time.perf_counter()
    if members:   # each seed's own tasks then find their checkpoints finished
        specs = {k: Spec.model_validate(v) for k, v in
                 json.loads(members_specs_json(spec)).items()}
        train_members.run(specs, out / "members", resume="none")
        times["train_members (warm start, local, entries)"] = time.perf_counter() - start
    timed = [("partition_data", lambda s: partition_data.run(spec, s, part(s))),
             ("warm_start_fedavg", lambda s: warm_start.run(
                 spec, s, part(s), ck(s), out / f"seed-{s}/fedavg")),
             ("train_local", lambda s: train_local.run(spec, s, part(s), out / f"seed-{s}/local")),
             ("select_teachers", lambda s: select_teachers.run(spec, ck(s),
                                                               out / f"seed-{s}/teachers")),
             ("distill_grid_search", lambda s: distill_grid_search.run(
                 spec, s, part(s), ck(s), out / f"seed-{s}/teachers", out / f"seed-{s}/persfl"))]
    timed += [(f"personalize[{label}]", lambda s, label=label: personalize.run(
        spec, s, label, part(s), ck(s), out / f"seed-{s}/{label}")) for label in labels]
    for name, run in timed:
        start = time.perf_counter()
        for seed in seeds:
            run(seed)
        times[name] = time.perf_counter() - start
    return times


def end_to_end(text: str, out: Path) -> float:
    """Wall seconds of `pflpipe run --fresh` of the spec."""
    path = out / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    start = time.perf_counter()
    cli = Path(sys.executable).parent / "pflpipe"
    done = subprocess.run([str(cli), "run", str(path), "--fresh"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS":
                                                                "ignore"})
    if done.returncode:
        raise SystemExit(f"pflpipe run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def main() -> None:
    """Run the protocol both ways; print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", default="tiny", choices=sorted(SCALES))
    parser.add_argument("--splits", default="ds1,ds2,ds3")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--stages-only", action="store_true")
    which.add_argument("--e2e-only", action="store_true")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        root.mkdir()
        write_pool(root, scale["samples"])
        for split in args.splits.split(","):
            texts = {m: spec_text(split, scale, Path(tmp) / split / str(m), root, args.device, m)
                     for m in (False, True)}
            if not args.e2e_only:
                apart = stages(texts[False], Path(tmp) / split / "stages-per-seed", False)
                together = stages(texts[True], Path(tmp) / split / "stages-members", True)
                rows += [(split, name, apart.get(name), together[name]) for name in together]
                rows += [(split, name, seconds, None) for name, seconds in apart.items()
                         if name not in together]
                rows.append((split, "stages, total", sum(apart.values()),
                             sum(together.values())))
            if not args.stages_only:
                rows.append((split, "pflpipe run (end to end)",
                             end_to_end(texts[False], Path(tmp) / split / "e2e-per-seed"),
                             end_to_end(texts[True], Path(tmp) / split / "e2e-members")))
    print(f"scale {args.scale}: {scale}, splits {args.splits}, device {args.device}")
    print(f"{'split':5} {'stage':45} {'per seed s':>10} {'members s':>10} {'ratio':>6}")
    for split, name, apart, together in rows:
        ratio = f"{apart / together:5.2f}×" if apart and together else ""
        print(f"{split:5} {name:45} {_s(apart):>10} {_s(together):>10} {ratio:>6}")


def _s(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.1f}"


if __name__ == "__main__":
    main()
