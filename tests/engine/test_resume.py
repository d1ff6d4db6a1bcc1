"""A warm start killed with SIGKILL mid-run resumes and ends exactly as an uninterrupted run."""

import os
import signal
import subprocess
import sys
import textwrap

import torch

SPEC = """\
experiment: {{name: resume, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 10}}
federation: {{rounds: 8, lr: 0.1}}
engine: {{device: cpu}}
storage: {{kind: local, path: {store}}}
"""

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pflpipe.spec import read_spec
    from pflpipe.stages import partition_data, warm_start_fedavg

    spec, out = read_spec(sys.argv[1]), Path(sys.argv[2])
    if not (out / "partition" / "manifest.json").exists():
        partition_data.run(spec, 0, out / "partition")
    def report(round_idx, rows):
        print(f"round {round_idx}", flush=True)
    warm_start_fedavg.run(spec, 0, out / "partition", out / "checkpoints", out / "results",
                          on_round=report)
    print("done", flush=True)
""")


def _spec(tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(out=tmp_path / name, store=tmp_path / name / "store"))
    return path


def _start(spec, out):
    return subprocess.Popen([sys.executable, "-c", CHILD, str(spec), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CI": "true"})


def _kill_after_round(child, round_idx):
    """SIGKILL the child once it reports `round_idx` done."""
    for line in child.stdout:
        if line.strip() == f"round {round_idx}":
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL


def test_warm_start_killed_mid_run_resumes_to_the_uninterrupted_result(tmp_path):
    # Prepare: a run killed with SIGKILL while training round 4
    killed_spec = _spec(tmp_path, "killed")
    child = _start(killed_spec, tmp_path / "killed")
    _kill_after_round(child, 3)

    # Execute: the same spec again, and an uninterrupted run elsewhere
    resumed = _start(killed_spec, tmp_path / "killed")
    resumed_out, resumed_err = resumed.communicate(timeout=600)
    clean = _start(_spec(tmp_path, "clean"), tmp_path / "clean")
    clean_out, clean_err = clean.communicate(timeout=600)

    # Assert: resumed after round 3 (never re-ran 1-3) and ended identically
    assert resumed.returncode == 0, resumed_err
    assert clean.returncode == 0, clean_err
    resumed_rounds = [int(line.split()[1]) for line in resumed_out.split("\n")
                      if line.startswith("round")]
    assert resumed_rounds[0] >= 4 and resumed_rounds[-1] == 8
    for round_idx in range(9):
        name = f"round_{round_idx:04d}.pt"
        a = torch.load(tmp_path / "killed" / "checkpoints" / name, weights_only=True)
        b = torch.load(tmp_path / "clean" / "checkpoints" / name, weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    for name in ("round_metrics.csv",):
        assert ((tmp_path / "killed" / "checkpoints" / name).read_text()
                == (tmp_path / "clean" / "checkpoints" / name).read_text())
    assert ((tmp_path / "killed" / "results" / "results.csv").read_text()
            == (tmp_path / "clean" / "results" / "results.csv").read_text())


STATEFUL_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path

    import torch
    from torch import nn

    from pflpipe.algorithms.algorithm import Algorithm
    from pflpipe.engine.data import FederatedData, SplitData
    from pflpipe.engine.federation import Federation, Plan
    from pflpipe.engine.trainer import BatchedTrainer, Context
    from pflpipe.engine.tree import weighted_mean
    from pflpipe.storage import LocalStore


    class SampledMomentum(Algorithm):
        '''Server momentum (server state), noisy local steps (engine noise), a kept counter.'''

        kept = ("seen",)

        def init_server(self, global_params, n_clients):
            return {"momentum": {k: torch.zeros_like(v) for k, v in global_params.items()}}

        def init_kept(self, global_params):
            return {"seen": {"n": torch.tensor(0.0)}}

        def local_objective(self, state, batch, shared, hp, ctx):
            noisy = {k: v + 0.05 * ctx.normal(batch["key"], v.shape, salt=i)
                     for i, (k, v) in enumerate(sorted(state["model"].items()))}
            return ctx.task_loss(noisy, batch)

        def finish(self, start, trained, shared):
            return {**trained, "seen": {"n": start["seen"]["n"] + 1}}

        def server_step(self, round):
            mean = weighted_mean(round.states["model"], round.weights)
            old = round.server["momentum"]
            momentum = {k: 0.9 * old[k] + mean[k] - round.global_params[k] for k in mean}
            new = {k: round.global_params[k] + momentum[k] for k in mean}
            return new, {"momentum": momentum}


    out = Path(sys.argv[1])
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 6, generator=generator) for n in (30, 12, 50, 7)]
    ys = [torch.randint(0, 3, (len(x),), generator=generator) for x in xs]
    split = SplitData.from_clients(xs, ys)
    torch.manual_seed(0)
    ctx = Context(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)))
    init = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
    algorithm = SampledMomentum(None, head=frozenset(), lr=0.1, local_epochs=1)
    plan = Plan(rounds=8, local_epochs=1, batch_size=8, lr=0.1, seed=3, client_fraction=0.5)

    def report(round_idx, rows):
        print(f"round {round_idx}", flush=True)

    result = Federation(algorithm, ctx, FederatedData(split, split, split), BatchedTrainer(ctx),
                        plan, LocalStore(out / "store"), "stateful", report).run(init)
    torch.save({"global": result.global_params, "server": result.server, "state": result.state,
                "best": result.best_model}, out / "result.pt")
    print("done", flush=True)
""")


def test_server_state_and_noise_resume_bit_exactly_after_sigkill(tmp_path):
    # Prepare: a stateful, sampling algorithm killed with SIGKILL after round 3 of 8
    def start(out):
        return subprocess.Popen([sys.executable, "-c", STATEFUL_CHILD, str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    child = start(tmp_path / "killed")
    _kill_after_round(child, 3)

    # Execute: the same run again (it resumes), and an uninterrupted run elsewhere
    resumed = start(tmp_path / "killed")
    resumed_out, resumed_err = resumed.communicate(timeout=300)
    clean = start(tmp_path / "clean")
    _, clean_err = clean.communicate(timeout=300)

    # Assert: resumed after round 3 and ended bit-identical, server state included
    assert resumed.returncode == 0, resumed_err
    assert clean.returncode == 0, clean_err
    assert resumed_out.split("\n")[0] == "round 4"
    a = torch.load(tmp_path / "killed" / "result.pt", weights_only=True)
    b = torch.load(tmp_path / "clean" / "result.pt", weights_only=True)
    assert set(a["server"]) == {"momentum"}
    for part in ("global",):
        assert all(torch.equal(a[part][k], b[part][k]) for k in b[part]), part
    for part in ("server", "state", "best"):
        for group in b[part]:
            assert all(torch.equal(a[part][group][k], b[part][group][k]) for k in b[part][group])
    assert a["state"]["seen"]["n"].sum() == 2 * 8   # 2 of the 4 clients in each of 8 rounds
