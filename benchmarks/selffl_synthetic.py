"""Self-FL's synthetic reproduction (Chen et al. 2022, §4.1, App. G.1, Figs. 4–5).

Two-level Gaussian data: M = 20 clients, θ_m ~ N(θ₀ = 1.6, σ₀²), N_m observations ~ N(θ_m, 0.1).
Case 1 (homogeneous): σ₀² = 0.001, N_m ~ U{10..20}; Case 2 (heterogeneous): σ₀² = 1,
N_m ~ U{10..200}. Every method runs full-batch gradient descent on each client's negative
log-likelihood at lr 1e-4 for 200 rounds from θ⁰ = 0; Self-FL with the known variances (ℓ_m from
Eqn. 16, no cap), the others with 50 local steps, at activity rates C ∈ {0.1, 0.2, 0.5, 0.8, 1}.
Errors are ℓ1: global |θ^T − θ₀|, local (1/M) Σ_m |θ_m^T − θ_m| with each method's personalized
model (FedAvg: the client's last local model, as in the paper), averaged over the repetitions.
The "Bayes" row is the two-level model's posterior means θ^(G), θ_m^(FL) from the same data.

The repetitions are members of one engine computation: R repetitions × M clients form one
federation of R·M clients whose server aggregates within each repetition (`Repeated`, sampling
by `Plan(blocks=R)`), not a loop of runs.

    python benchmarks/selffl_synthetic.py                     # R = 50, both cases
    python benchmarks/selffl_synthetic.py --repetitions 200 --cases 2 --fractions 0.1 1
"""

import argparse
import time

import numpy as np
import torch

from pflpipe.algorithms import REGISTRY, FedAvg
from pflpipe.data.synthetic import gaussian
from pflpipe.engine.data import FederatedData, SplitData
from pflpipe.engine.federation import Federation, Plan
from pflpipe.engine.repetitions import Repeated
from pflpipe.engine.trainer import BatchedTrainer
from pflpipe.engine.two_level import GaussianLikelihood, ScalarMean, posterior_means
from pflpipe.spec.algorithms import PARAMS

M, THETA0, SIGMA_SQ, ROUNDS, LR, BASELINE_STEPS = 20, 1.6, 0.1, 200, 1e-4, 50
CASES = {1: {"sigma0_sq": 0.001, "n_min": 10, "n_max": 20},
         2: {"sigma0_sq": 1.0, "n_min": 10, "n_max": 200}}
FRACTIONS = (0.1, 0.2, 0.5, 0.8, 1.0)


def methods(sigma0_sq: float) -> dict[str, tuple[dict | None, int]]:
    """(spec entry, local epochs) per method (FedAvg: None); one epoch is one full-batch step."""
    oracle = {"sigma0_sq": sigma0_sq, "sigma_sq": SIGMA_SQ}
    return {
        "self_fl": ({"name": "self_fl", "oracle": oracle, "max_local_steps": 100_000}, 1),
        "fedavg": (None, BASELINE_STEPS),
        "ditto": ({"name": "ditto", "lam": 1.0, "personal_epochs": BASELINE_STEPS},
                  BASELINE_STEPS),
        "pfedme": ({"name": "pfedme", "lam": 15.0, "inner_steps": 5, "personal_lr": 5e-4},
                   BASELINE_STEPS),
        # each meta-step draws two batches, i.e. two epochs: 100 epochs are 50 steps
        "per_fedavg": ({"name": "per_fedavg", "alpha": LR, "beta": 1e-3}, 2 * BASELINE_STEPS),
    }


def make_data(case: int, repetitions: int, seed: int) -> tuple[FederatedData, np.ndarray,
                                                                np.ndarray]:
    """R·M clients (repetition r owns clients rM..rM+M−1); the truth θ [R, M] and z [R, M]."""
    rng = np.random.default_rng([seed, case])
    params = {"theta0": THETA0, "sigma_sq": SIGMA_SQ, **CASES[case]}
    xs, ys, theta, means = [], [], [], []
    for _ in range(repetitions):
        drawn = gaussian(M, rng, **params)
        theta.append(drawn.truth["theta"])
        for client in range(M):
            y = drawn.y[drawn.groups == client]
            xs.append(torch.ones(len(y), 1))
            ys.append(torch.from_numpy(y))
            means.append(y.astype(np.float64).mean())
    split = SplitData.from_clients(xs, ys)
    return (FederatedData(split, split, split), np.array(theta),
            np.array(means).reshape(repetitions, M))


def run(method: str, case: int, fraction: float, data: FederatedData, repetitions: int,
        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Global [R] and personalized [R, M] estimates of one method at one activity rate."""
    entry, epochs = methods(CASES[case]["sigma0_sq"])[method]
    cls, params = ((FedAvg, None) if entry is None else
                   (REGISTRY[entry["name"]], PARAMS[entry["name"]].model_validate(entry)))
    algorithm = Repeated(cls(params, head=frozenset(), lr=LR, local_epochs=epochs), repetitions)
    ctx = GaussianLikelihood(ScalarMean(), sigma_sq=SIGMA_SQ)
    plan = Plan(rounds=ROUNDS, local_epochs=epochs, batch_size=CASES[case]["n_max"], lr=LR,
                seed=seed, client_fraction=fraction, eval_every=ROUNDS, score_global=False,
                blocks=repetitions)
    result = Federation(algorithm, ctx, data, BatchedTrainer(ctx), plan).run(
        {"theta": torch.zeros(1)})
    personal = (result.state if method == "fedavg" else result.last_model)["model"]["theta"]
    return (result.server["global"]["theta"].view(repetitions).double().numpy(),
            personal.view(repetitions, M).double().numpy())


def table(case: int, repetitions: int, fractions: tuple[float, ...], seed: int) -> str:
    """The Markdown table of one case: global and local ℓ1 errors per method and C."""
    data, theta, z = make_data(case, repetitions, seed)
    sigma0_sq = CASES[case]["sigma0_sq"]
    counts = data.train.counts.view(repetitions, M).double().numpy()
    bayes = [posterior_means(z[r], sigma0_sq, SIGMA_SQ / counts[r]) for r in range(repetitions)]
    header = " | ".join(f"C = {c:g}" for c in fractions)
    lines = [f"| method | error | {header} |", "|---|---|" + "---|" * len(fractions)]
    bayes_global = np.mean([abs(g - THETA0) for g, _ in bayes])
    bayes_local = np.mean([np.abs(fl - theta[r]).mean() for r, (_, fl) in enumerate(bayes)])
    for method in methods(sigma0_sq):
        errors = {"global": [], "local": []}
        for fraction in fractions:
            global_, personal = run(method, case, fraction, data, repetitions, seed)
            errors["global"].append(np.abs(global_ - THETA0).mean())
            errors["local"].append(np.abs(personal - theta).mean(1).mean())
        for kind, values in errors.items():
            lines.append(f"| {method} | {kind} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    lines.append(f"| Bayes θ^(G), θ_m^(FL) | global / local | {bayes_global:.4f} / "
                 f"{bayes_local:.4f} (any C) |" + " |" * (len(fractions) - 1))
    return "\n".join(lines)


def main() -> None:
    """Print the table of each case."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--cases", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for case in args.cases:
        start = time.perf_counter()
        text = table(case, args.repetitions, tuple(args.fractions), args.seed)
        print(f"\nCase {case} (σ₀² = {CASES[case]['sigma0_sq']:g}, N_m ~ U{{"
              f"{CASES[case]['n_min']}..{CASES[case]['n_max']}}}), {args.repetitions} "
              f"repetitions, {time.perf_counter() - start:.0f} s\n")
        print(text, flush=True)


if __name__ == "__main__":
    main()
