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
    from pflpipe.spec import load_spec
    from pflpipe.stages import partition_data, warm_start_fedavg

    spec, out = load_spec(sys.argv[1]), Path(sys.argv[2])
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


def test_warm_start_killed_mid_run_resumes_to_the_uninterrupted_result(tmp_path):
    # Prepare: a run killed with SIGKILL while training round 4
    killed_spec = _spec(tmp_path, "killed")
    child = _start(killed_spec, tmp_path / "killed")
    for line in child.stdout:
        if line.strip() == "round 3":
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    assert child.returncode == -signal.SIGKILL

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
