"""`pflpipe run` says what it did: a reused `pflpipe split` partition, a resumed stage, threads,
and --fresh recomputing everything; a FedAvg-only train/test spec end to end.

Two real runs on the local runner (4 tasks each: FedAvg only, `personalization: []`). A rerun
taking stages from the cache (↺ cached) is tested in test_run_errors.py; what each `resume`
mode does with checkpoints, stage by stage, in tests/components/test_stage_run_control.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pflpipe import events
from pflpipe.cli import main
from pflpipe.report.report_writer import NO_VALIDATION
from pflpipe.spec import read_spec
from pflpipe.stages import partition_data, warm_start_fedavg

SPEC = """\
experiment: {{name: run-control, output_dir: {out}}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4,
             fractions: {{train: 0.75, test: 0.25}}}}
federation: {{rounds: 3}}
personalization: []
"""


def pflpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


class Interrupted(Exception):
    pass


def stop_after_round_1(round_idx, rows):
    if round_idx == 1:
        raise Interrupted


def line(output: str, stage: str) -> str:
    """The one line `pflpipe run` printed for `stage`, its wrapped continuation joined."""
    lines, found = output.splitlines(), []
    for i, text in enumerate(lines):
        if text.strip()[:1] in ("✓", "↺", "✗") and f" {stage}" in text:
            rest = []
            for more in lines[i + 1:]:   # the CLI wraps at 160 characters, indented
                if not more.startswith(" " * 6) or more.strip()[:1] in ("✓", "↺", "✗"):
                    break
                rest.append(more.strip())
            found.append(" ".join([text, *rest]))
    assert len(found) == 1, output
    return found[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("run-control")
    (work / "spec.yaml").write_text(SPEC.format(out=work / "results"))
    spec = read_spec(work / "spec.yaml")
    assert main(["split", str(work / "spec.yaml")]) == 0
    # a warm start killed after round 1, as a crash would leave it
    partition_data.run(spec, 0, work / "scratch" / "partition")
    with pytest.raises(Interrupted):
        warm_start_fedavg.run(spec, 0, work / "scratch" / "partition", work / "scratch" / "ck",
                              work / "scratch" / "fedavg", on_round=stop_after_round_1)
    first = pflpipe("run", "spec.yaml", "--threads", "1", cwd=work)
    fresh = pflpipe("run", "spec.yaml", "--fresh", cwd=work)
    return work, first, fresh


def test_run_picks_up_the_split_partition_and_resumes_the_interrupted_stage(runs):
    work, first, _ = runs
    assert first.returncode == 0, first.stderr

    partition = line(first.stdout, "partition_data")
    warm = line(first.stdout, "warm_start_fedavg")

    assert partition.lstrip().startswith("↺")
    assert f"reused the partition of `pflpipe split` in {work / 'results'}" in partition
    assert "1 torch thread; resumed from round 1/3" in warm
    split_hash = json.loads((work / "results/partition/seed-0/manifest.json").read_text())
    first_run = sorted((work / "results" / "kfp").glob("**/partition-data/partition"))[0]
    assert json.loads((first_run / "manifest.json").read_text())["content_hash"] == \
        split_hash["content_hash"]


def test_threads_and_parallel_tasks_are_set_and_shown(runs):
    work, first, _ = runs

    header = first.stdout.splitlines()[:2]

    assert header[0].endswith("algorithms fedavg")  # personalization: [] is FedAvg only
    assert "task(s) at once × 1 torch thread(s)" in header[1]
    assert "train_local" not in first.stdout
    log = (work / "results" / "logs" / "warm_start_fedavg_seed_0.log").read_text()
    assert {"event": "notice", "text": "1 torch thread"} in map(events.parse, log.splitlines())


def test_train_test_only_spec_reports_its_selection_rule(runs):
    work, first, _ = runs

    report = json.loads((work / "results" / "latest" / "report" / "report.json").read_text())
    table = (work / "results" / "latest" / "seed-0" / "results.csv").read_text()

    assert NO_VALIDATION in report["protocol"]
    assert list(report["splits"]) == ["test"] and ",val," not in table
    assert "warning: no validation split" in line(first.stdout, "partition_data")


def test_fresh_recomputes_everything(runs):
    _, _, fresh = runs
    assert fresh.returncode == 0, fresh.stderr

    assert "--fresh: everything recomputed from round 0" in fresh.stdout.splitlines()[1]
    assert line(fresh.stdout, "partition_data").lstrip().startswith("✓")
    assert "reused" not in line(fresh.stdout, "partition_data")
    assert "recomputed: discarded the checkpoints of round 3/3 (--fresh)" in \
        line(fresh.stdout, "warm_start_fedavg")
