"""The disk a full run needs: `validate` prints it, `run` refuses a results folder too small."""

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from pflpipe.disk import estimate
from pflpipe.spec import parse_spec
from pflpipe.spec.model import Model

#: 10 synthetic clients of exp(0 + 0²/2) + 50 = 51 samples; the default MLP 60 → 100 → 10.
SPEC = """\
experiment: {name: disk, output_dir: results, seeds: [0, 1]}
dataset: {name: synthetic, mean_samples: 1.0e-9, sigma_samples: 0}
partition: {strategy: natural, n_clients: 10}
federation: {rounds: 5}
personalization:
  - {name: fedper}
"""
MODEL = 4 * (60 * 100 + 100 + 100 * 10 + 10)   # 28,440 bytes


def test_estimate_adds_partition_results_checkpoints_and_mlflow_per_seed():
    need = estimate(parse_spec(SPEC))
    # per seed: 510 samples of 60 float32 features, a label and an index; 6,500 B per client
    assert need.partition == 2 * (510 * (60 * 4 + 16) + 10 * 6_500)
    # local and fedper hold a model file per client (2,400 B of records each), fedavg two
    # global models; the report's per-client tables 13,000 B per client
    assert need.results == 2 * (2 * 10 * (MODEL + 2_400) + 2 * MODEL + 10 * 13_000)
    # 2 copies per client (the warm start's best models, the training stage's states; the
    # finished stages' best models are links of the results') and a model per warm-start round
    assert need.checkpoints == 2 * (2 * 10 + 5) * MODEL
    # MLflow: the clients' models once more, and a 300-byte row per client and round 0..5
    assert need.tracking == 2 * (2 * 10 * MODEL + 2 * 10 * 6 * 300)
    assert need.total == (need.partition + need.results + need.checkpoints + need.tracking
                          + 5_000_000)   # the report, logs, MLflow's own tables


def test_a_bayesian_or_routed_entry_s_client_files_count_what_they_keep_beside_the_model():
    # pFedBayes saves every weight's spread, pFedVEM its head's (100 × 10 + 10 weights), Flow
    # its local copy and the routing network ψ (60 → 12 → 2 exits, 12 → 2 last: 60·12 + 12 +
    # 12·2 + 2 + 12·2 + 2 = 784 weights)
    spec = parse_spec(SPEC.replace("  - {name: fedper}", "  - {name: pfedbayes}\n"
                                   "  - {name: pfedvem}\n  - {name: flow, router_widths: [12]}"))
    saved = MODEL + 2 * MODEL + (MODEL + 4 * 1_010) + (2 * MODEL + 4 * 784)  # local first
    need = estimate(spec)
    assert need.results == 2 * (10 * (saved + 4 * 2_400) + 2 * MODEL + 10 * 13_000)
    assert need.tracking == 2 * (10 * saved + 4 * 10 * 6 * 300)


def test_flow_counts_the_routing_network_it_builds():
    from pflpipe.algorithms.flow import Router
    from pflpipe.spec.algorithms.flow_params import FlowParams

    for widths in ([12], [40, 7, 3]):
        router = Router(60, widths)
        model = 7_110
        beside = FlowParams(name="flow", router_widths=widths).saved_beside(model, None, 60)
        assert beside == model + sum(p.numel() for p in router.parameters())


def test_estimate_counts_no_local_checkpoints_or_models_where_none_are_written():
    spec = parse_spec(SPEC.replace("federation:", "tracking: {log_models: false}\nfederation:")
                      + "storage: {kind: s3, bucket: pfl-bucket}\n")
    need = estimate(spec)
    assert need.checkpoints == 0 and need.tracking == 2 * 2 * 10 * 6 * 300


def pflpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def test_validate_prints_the_disk_a_run_needs(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    done = pflpipe("validate", "spec.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    total = estimate(parse_spec(SPEC)).total
    assert f"  disk                about {total / 1e6:.1f} MB (partition" in done.stdout
    assert "in results/ (`pflpipe run` checks its free space)" in done.stdout


def test_run_refuses_a_results_folder_with_too_little_space_before_writing(tmp_path):
    # exp(40) ≈ 2.4e17 samples per client: no disk holds the partition
    (tmp_path / "spec.yaml").write_text(SPEC.replace("mean_samples: 1.0e-9", "mean_samples: 40"))
    done = pflpipe("run", "spec.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: experiment.output_dir: the results folder results is "
                                  "on a file system with ")
    assert " free; a full run of this spec needs about " in done.stderr
    assert "give --results a folder on a larger disk" in done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "mlflow.db").exists()


ARCHITECTURES = {"mlp": {"hidden": [7, 3]}, "logistic": {}, "cnn_cifar": {},
                 "fedavg_cnn": {"hidden": 9}, "cnn6": {}}


@settings(max_examples=40, deadline=None)
@given(architecture=st.sampled_from(sorted(ARCHITECTURES)), channels=st.integers(1, 3),
       height=st.integers(1, 40), width=st.integers(1, 40), n_classes=st.integers(2, 12))
def test_builtin_parameter_count_equals_the_zoo_model_built_on_the_meta_device(
        architecture, channels, height, width, n_classes):
    from pflpipe.disk import _builtin_parameters
    from pflpipe.errors import SpecError
    from pflpipe.models.check import count_parameters

    model = TypeAdapter(Model).validate_python({"architecture": architecture,
                                                **ARCHITECTURES[architecture]})
    shape = (channels, height, width)

    counted = _builtin_parameters(model, shape, n_classes)

    try:
        built = count_parameters(model, shape, n_classes)
    except SpecError:   # a shape the CNN cannot take
        built = None
    # None: a CNN's image too small for its two pools, left to torch (and its SpecError)
    assert counted == built or (counted is None and architecture in ("cnn_cifar", "fedavg_cnn"))
    if built is not None:   # the head: the layer a Bayesian head's spread covers
        import torch

        from pflpipe.disk import _head_parameters
        from pflpipe.models import build_model

        with torch.device("meta"):
            head = build_model(model, shape, n_classes, 0).head
        assert _head_parameters(model, shape, n_classes) == sum(p.numel()
                                                                for p in head.parameters())


def test_the_disk_check_of_a_built_in_model_imports_no_torch():
    # torch costs the CLI ~2 CPU s before the first task; the quickstart's check needs none
    code = ("import sys; from pathlib import Path; from pflpipe.spec import read_spec; "
            "from pflpipe.disk import check_free_space; "
            "need = check_free_space(read_spec(Path('specs/persfl-digits.yaml')), Path('.')); "
            "print(need.results, 'torch' in sys.modules)")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[2])

    assert result.stdout.split()[1] == "False" and int(result.stdout.split()[0]) > 0
