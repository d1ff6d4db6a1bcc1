"""Self-FL's synthetic reproduction (Chen et al. 2022, §4.1, App. G.1, Figs. 4–5).

Two-level Gaussian data: M = 20 clients, θ_m ~ N(θ₀ = 1.6, σ₀²), N_m observations ~ N(θ_m, 0.1).
Case 1 (homogeneous): σ₀² = 0.001, N_m ~ U{10..20}; Case 2 (heterogeneous): σ₀² = 1,
N_m ~ U{10..200}. Every method runs full-batch gradient descent on each client's negative
log-likelihood at lr 1e-4 for 200 rounds from θ⁰ = 0; Self-FL with the known variances (ℓ_m from
Eqn. 16, no cap), the others with 50 local steps, at activity rates C ∈ {0.1, 0.2, 0.5, 0.8, 1}.
Errors are ℓ1: global |θ^T − θ₀|, local (1/M) Σ_m |θ_m^T − θ_m| with each method's personalized
model (FedAvg: the client's last local model, as in the paper), mean ± standard error over the
repetitions. Three reference rows from the same data, no training: "Eqn. 3" is the paper's
global-optimal θ^(G) and FL-optimal θ_m^(FL) (Eqns. 2–3), the targets of Self-FL's Prop. 3.1;
"posterior mean" is θ^(G) (the posterior mean of θ₀) with the two-level model's exact posterior
means E[θ_m | z_1..z_M], which differ from θ_m^(FL) (`pflpipe.engine.two_level`); "local only"
is each client's z_m. `--references-only` prints these rows alone (seconds).

The repetitions are members of one engine computation: R repetitions × M clients form one
federation whose server aggregates within each repetition (`Repeated`, sampling by
`Plan(blocks=R)`), not a loop of runs. The baselines run both cases in one federation (their
settings do not depend on the case); Self-FL runs each case alone (its known σ₀² does). FedAvg
is read off Ditto's run: Ditto's global model and its clients' trained w are FedAvg's, step for
step (Ditto trains its personal model beside them).

    python benchmarks/selffl_synthetic.py                     # R = 25, both cases
    python benchmarks/selffl_synthetic.py --repetitions 200 --fractions 0.1 1
    python benchmarks/selffl_synthetic.py --repetitions 10 --references-only
"""

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from pflpipe.algorithms import REGISTRY
from pflpipe.data.synthetic import gaussian
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.repetitions import Repeated
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.engine.two_level import GaussianLikelihood, ScalarMean, fl_optimal, posterior_means
from pflpipe.spec.algorithms import PARAMS

M, THETA0, SIGMA_SQ, ROUNDS, LR, STEPS = 20, 1.6, 0.1, 200, 1e-4, 50
CASES = {1: {"sigma0_sq": 0.001, "n_min": 10, "n_max": 20},
         2: {"sigma0_sq": 1.0, "n_min": 10, "n_max": 200}}
FRACTIONS = (0.1, 0.2, 0.5, 0.8, 1.0)
METHODS = ("self_fl", "fedavg", "ditto", "pfedme", "per_fedavg")
#: (spec entry, local epochs); one epoch is one full-batch step, a Per-FedAvg step draws two.
BASELINES = {
    "ditto": ({"name": "ditto", "lam": 1.0, "personal_epochs": STEPS}, STEPS),
    "pfedme": ({"name": "pfedme", "lam": 15.0, "inner_steps": 5, "personal_lr": 5e-4}, STEPS),
    "per_fedavg": ({"name": "per_fedavg", "alpha": LR, "beta": 1e-3}, 2 * STEPS),
}


@dataclass(frozen=True)
class Draws:
    """R draws of M clients of one case: their observations, θ_m [R, M] and z_m [R, M]."""

    ys: list[torch.Tensor]
    theta: np.ndarray
    z: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """N_m [R, M]."""
        return np.array([len(y) for y in self.ys], dtype=float).reshape(self.theta.shape)


def draw(case: int, repetitions: int, seed: int) -> Draws:
    """R independent draws of Case `case` (repetition r owns clients rM..rM+M−1)."""
    rng = np.random.default_rng([seed, case])
    params = {"theta0": THETA0, "sigma_sq": SIGMA_SQ, **CASES[case]}
    ys, theta = [], []
    for _ in range(repetitions):
        drawn = gaussian(M, rng, **params)
        theta.append(drawn.truth["theta"])
        ys += [torch.from_numpy(drawn.y[drawn.groups == m]) for m in range(M)]
    z = np.array([y.double().mean().item() for y in ys]).reshape(repetitions, M)
    return Draws(ys, np.array(theta), z)


def run(entry: dict, epochs: int, ys: list[torch.Tensor], fraction: float, seed: int
        ) -> dict[str, np.ndarray]:
    """One method on R·M clients: its global [R], personalized [R, M] and trained w [R, M]."""
    repetitions = len(ys) // M
    params = PARAMS[entry["name"]].model_validate(entry)
    algorithm = Repeated(REGISTRY[entry["name"]](params, head=frozenset(), lr=LR,
                                                 local_epochs=epochs), repetitions)
    split = SplitData.from_clients([torch.ones(len(y), 1) for y in ys], ys)
    ctx = GaussianLikelihood(ScalarMean(), sigma_sq=SIGMA_SQ)
    plan = Plan(rounds=ROUNDS, local_epochs=epochs, batch_size=max(len(y) for y in ys), lr=LR,
                seed=seed, client_fraction=fraction, eval_every=ROUNDS, score_global=False,
                blocks=repetitions)
    start = time.perf_counter()
    result = Federation(algorithm, ctx, FederatedData(split, split, split), BatchedTrainer(ctx),
                        plan).run({"theta": torch.zeros(1)})
    print(f"{entry['name']}, C = {fraction:g}, {repetitions} repetitions: "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return {"global": result.server["global"]["theta"].view(repetitions).double().numpy(),
            "personal": result.last_model["model"]["theta"].view(repetitions, M).double().numpy(),
            "trained": result.state["model"]["theta"].view(repetitions, M).double().numpy()}


def estimates(cases: dict[int, Draws], fraction: float, seed: int) -> dict[str, dict]:
    """{method: {case: (global [R], personalized [R, M])}} at one activity rate."""
    out: dict[str, dict] = {m: {} for m in METHODS}
    for case, draws in cases.items():
        oracle = {"sigma0_sq": CASES[case]["sigma0_sq"], "sigma_sq": SIGMA_SQ}
        found = run({"name": "self_fl", "oracle": oracle, "loss_reduction": "sum",
                     "max_local_steps": 100_000}, 1,
                    draws.ys, fraction, seed)
        out["self_fl"][case] = found["global"], found["personal"]
    ys = [y for draws in cases.values() for y in draws.ys]
    for method, (entry, epochs) in BASELINES.items():
        found = run(entry, epochs, ys, fraction, seed)
        for index, (case, draws) in enumerate(cases.items()):
            rows = slice(index * len(draws.theta), (index + 1) * len(draws.theta))
            out[method][case] = found["global"][rows], found["personal"][rows]
            if method == "ditto":
                out["fedavg"][case] = found["global"][rows], found["trained"][rows]
    return out


def _cell(errors: np.ndarray) -> str:
    """Mean ± standard error over repetitions; a dash where there is no estimate."""
    if np.isnan(errors).all():
        return "—"
    return f"{errors.mean():.4f} ± {errors.std(ddof=1) / np.sqrt(len(errors)):.4f}"


def references(case: int, draws: Draws) -> list[str]:
    """The table rows of the estimates computed from the data alone (any C)."""
    sigma0_sq, r = CASES[case]["sigma0_sq"], len(draws.z)
    eqn3 = [fl_optimal(draws.z[i], sigma0_sq, SIGMA_SQ / n) for i, n in enumerate(draws.counts)]
    theta_g = np.array([g for g, _ in eqn3])
    rows = {"Eqn. 3: θ^(G) / θ_m^(FL)": (theta_g, np.array([fl for _, fl in eqn3])),
            "posterior mean: θ^(G) / E[θ_m \\| z]": (theta_g, np.array([
                posterior_means(draws.z[i], sigma0_sq, SIGMA_SQ / n)
                for i, n in enumerate(draws.counts)])),
            "local only z_m": (np.full(r, np.nan), draws.z)}
    return [f"| {name} | global / local | {_cell(np.abs(g - THETA0))} / "
            f"{_cell(np.abs(p - draws.theta).mean(1))} (any C) |"
            for name, (g, p) in rows.items()]


def tables(repetitions: int, fractions: tuple[float, ...], seed: int,
           train: bool = True) -> dict[int, str]:
    """The Markdown table of each case: global and local ℓ1 errors per method and C."""
    cases = {case: draw(case, repetitions, seed) for case in CASES}
    found = {c: estimates(cases, c, seed) for c in fractions} if train else {}
    header = " | ".join(f"C = {c:g}" for c in fractions)
    out = {}
    for case, draws in cases.items():
        lines = [f"| method | error | {header} |", "|---|---|" + "---|" * len(fractions)]
        for method in METHODS if train else ():
            estimates_ = [found[c][method][case] for c in fractions]
            cells = {"global": [_cell(np.abs(g - THETA0)) for g, _ in estimates_],
                     "local": [_cell(np.abs(p - draws.theta).mean(1)) for _, p in estimates_]}
            lines += [f"| {method} | {kind} | " + " | ".join(row) + " |"
                      for kind, row in cells.items()]
        lines += [row + " |" * (len(fractions) - 1) for row in references(case, draws)]
        out[case] = "\n".join(lines)
    return out


def main() -> None:
    """Print the table of each case."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=25)
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--references-only", action="store_true",
                        help="Print only the rows computed from the data (no training).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    found = tables(args.repetitions, tuple(args.fractions), args.seed,
                   train=not args.references_only)
    print(f"{args.repetitions} repetitions per case, seed {args.seed}, "
          f"{time.perf_counter() - start:.0f} s, torch {torch.__version__}, "
          f"{args.threads} thread(s)")
    for case, text in found.items():
        print(f"\nCase {case}: σ₀² = {CASES[case]['sigma0_sq']:g}, N_m ~ U{{"
              f"{CASES[case]['n_min']}..{CASES[case]['n_max']}}}\n\n{text}", flush=True)


if __name__ == "__main__":
    main()
