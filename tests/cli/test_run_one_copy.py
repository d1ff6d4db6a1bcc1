"""`pflpipe run` keeps one copy of each output on disk: what it publishes under runs/ are hard
links to kfp.local's outputs under the pipeline root, and a rerun from kfp's cache publishes the
cached outputs again without copying them (issue 50)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pflpipe import layout

SPEC = """\
experiment: {name: one-copy, output_dir: results}
dataset: {name: synthetic}
partition: {strategy: iid, n_clients: 4}
federation: {rounds: 2}
personalization:
  - {name: fedper, rounds: 2}
tracking: {enabled: false}
"""


def pflpipe(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run([str(Path(sys.executable).with_name("pflpipe")), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def _files(root: Path) -> dict[Path, os.stat_result]:
    return {p: p.stat() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    work = tmp_path_factory.mktemp("one-copy")
    (work / "spec.yaml").write_text(SPEC)
    first = pflpipe("run", "spec.yaml", cwd=work)
    assert first.returncode == 0, first.stderr
    again = pflpipe("run", "spec.yaml", cwd=work)
    assert again.returncode == 0, again.stderr
    return work / "results", first, again


def test_published_files_are_links_to_the_pipeline_roots_outputs(twice):
    results, _, _ = twice
    kfp = {(s.st_dev, s.st_ino) for s in _files(results / "kfp").values()}
    (first, second) = sorted((results / layout.RUNS).iterdir())
    published = _files(first)
    assert any(p.parent.name == layout.MODELS for p in published)  # the models are published
    assert {p for p, s in published.items() if (s.st_dev, s.st_ino) not in kfp} == set()
    # no model file is a copy of another anywhere under the results root (kfp's outputs, the
    # collected seeds, runs/): equal bytes are one file
    models = {p: s for p, s in _files(results).items() if p.parent.name == layout.MODELS}
    contents = {p.read_bytes() for p in models}
    assert len(models) > len(contents) == len({(s.st_dev, s.st_ino) for s in models.values()})


def test_rerun_from_the_cache_publishes_the_cached_outputs_again(twice):
    results, _, again = twice
    assert "↺ personalize[fedper]" in again.stdout and "↺ partition_data" in again.stdout
    (first, second) = sorted((results / layout.RUNS).iterdir())
    old, new = _files(first), _files(second)
    assert sorted(p.relative_to(first) for p in old) == sorted(p.relative_to(second) for p in new)
    # collect_results and the report run again; the trained models are the cached files
    models = [p for p in new if p.parent.name == layout.MODELS]
    assert len(models) == 4 + 4 + 2  # fedper's and local's clients, fedavg's two globals
    for path in models:
        assert new[path].st_ino == old[first / path.relative_to(second)].st_ino
    assert (results / layout.LATEST).resolve() == second.resolve()


def test_finished_checkpoints_hold_the_client_models_as_links_of_the_results(twice):
    # `checkpoint.compact`: a finished stage's best models are its results' files, not copies
    results, _, _ = twice
    kfp = {(s.st_dev, s.st_ino) for s in _files(results / "kfp").values()}
    stores = _files(results / layout.CHECKPOINTS)
    linked = {p: s for p, s in stores.items() if p.parent.name == layout.MODELS}
    assert {p.parent.parent.parent.name for p in linked} == {"train_local", "personalize"}
    assert len(linked) == 4 + 4 and all((s.st_dev, s.st_ino) in kfp for s in linked.values())
