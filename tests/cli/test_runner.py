"""`pflpipe run --runner docker` refuses, before anything starts, what its containers cannot share.

The rule (`pflpipe.sharing`) serves `run --runner docker` (the working and the results directory
are mounted) and `submit` (pods share no local path); here its answers for hand-made specs, and
the CLI's refusals, which need no container engine: a spec is refused before the engine is asked.
The runs in containers themselves: tests/server/test_containers.py.
"""

import os
from pathlib import Path

import pytest

from pflpipe.cli import main
from pflpipe.pipelines.containers import passed_environment
from pflpipe.sharing import CLUSTER, docker_sharing, unshared
from pflpipe.spec import parse_spec

WORK = Path("/work/project")
BASE = """\
experiment: {{name: share, output_dir: {results}}}
dataset: {dataset}
partition: {{strategy: iid, n_clients: 4}}
personalization: []
storage: {storage}
"""
DIGITS = "{name: digits}"
LOCAL = "{kind: local}"


def spec(results="results/share", dataset=DIGITS, storage=LOCAL):
    return parse_spec(BASE.format(results=results, dataset=dataset, storage=storage))


def docker(problem_spec, tracking="sqlite:////work/project/mlflow.db"):
    sharing = docker_sharing(problem_spec.experiment.results_dir, WORK)
    return unshared(problem_spec, sharing, tracking, WORK)


# --- the rule -------------------------------------------------------------------------------------

def test_docker_mounts_the_working_directory_and_a_results_directory_outside_it():
    assert docker_sharing("results/share", WORK).mounts == (WORK,)
    assert docker_sharing(".", WORK).mounts == (WORK,)
    assert docker_sharing("/big/results", WORK).mounts == (WORK, Path("/big/results"))


def test_a_results_directory_through_a_link_out_of_the_working_directory_is_mounted_real(
        tmp_path):
    # `--results vt/res` where vt links to a folder outside the working directory: mounting
    # only the working directory would leave the checkpoints on the container's own disk.
    work, outside = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), outside.mkdir()
    (work / "vt").symlink_to(outside)

    sharing = docker_sharing("vt/res", work)

    assert sharing.mounts == (work, outside / "res")
    assert unshared(spec(results="vt/res"), sharing, None, work) == []


def test_a_store_through_a_link_out_of_the_mounts_is_refused_naming_the_link(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), outside.mkdir()
    (work / "vt").symlink_to(outside)

    [problem] = unshared(spec(storage="{kind: local, path: vt/ck}"),
                         docker_sharing("results/share", work), None, work)

    assert problem.startswith(f"storage.path: {work}/vt/ck (a link to {outside}/ck) is outside "
                              f"what the docker runner mounts ({work}); a task would write")


def test_the_quickstarts_paths_are_all_shared_in_containers():
    """Results, checkpoints (the results directory) and ./mlflow.db lie under the working
    directory; the digits are bundled (no dataset file)."""
    assert docker(spec()) == []
    assert docker(spec(results="/big/results")) == []   # mounted too, with the store in it
    assert docker(spec(), tracking="http://127.0.0.1:5000") == []
    assert docker(spec(), tracking=None) == []


def test_a_store_outside_the_mounts_is_refused_naming_the_field_and_the_fix():
    [problem] = docker(spec(storage="{kind: local, path: /scratch/ck}"))

    assert problem == (
        "storage.path: /scratch/ck is outside what the docker runner mounts (/work/project); a "
        "task would write into its container's own disk, lost when the task ends; put the "
        "checkpoint store under the working directory or the results directory (omitted, it "
        "is the results directory), or use an S3 store (storage.kind: s3)")


@pytest.mark.parametrize(("case", "field", "tracking"), [
    ("sqlite elsewhere", "tracking.uri", "sqlite:////home/me/mlflow.db"),
    ("relative store above", "storage.path", None),
    ("dataset elsewhere", "dataset.root", None),
    ("index file above", "partition.path", None),
])
def test_each_path_outside_the_mounts_is_refused(case, field, tracking):
    the_spec = {
        "sqlite elsewhere": spec(),
        "relative store above": spec(storage="{kind: local, path: ../ck}"),
        "dataset elsewhere": spec(dataset="{name: arrays, path: d.npz, root: /datasets}"),
        "index file above": parse_spec(BASE.format(
            results="r", dataset="{name: arrays, path: d.npz}", storage=LOCAL).replace(
            "{strategy: iid, n_clients: 4}", "{strategy: predefined, path: ../../idx.npz}")),
    }[case]

    problems = docker(the_spec, tracking or "sqlite:////work/project/mlflow.db")

    assert [p.split(":", 1)[0] for p in problems] == [field]
    assert "outside what the docker runner mounts (/work/project)" in problems[0]


def test_a_dataset_each_task_downloads_needs_no_sharing():
    fetched = spec(dataset="{name: mnist, root: /datasets, source: 's3://data/mnist'}",
                   storage="{kind: s3, bucket: pfl}")
    assert docker(fetched) == []
    assert unshared(fetched, CLUSTER, None, WORK) == []


def test_a_cluster_shares_no_local_store_no_sqlite_file_and_no_relative_dataset_root():
    quickstart = spec(dataset="{name: arrays, path: d.npz, root: data}")

    problems = unshared(quickstart, CLUSTER, "sqlite:////work/project/mlflow.db", WORK)

    assert [p.split(":", 1)[0] for p in problems] == ["storage.kind", "tracking.uri",
                                                      "dataset.root"]
    s3 = spec(dataset="{name: arrays, path: d.npz, root: /datasets}",
              storage="{kind: s3, bucket: pfl}")
    assert unshared(s3, CLUSTER, "http://mlflow:5000", WORK) == []
    [database] = unshared(s3, CLUSTER, "postgresql://db:5432/mlflow?x=1", WORK)
    assert database.startswith("tracking.uri: tracking URI 'postgresql://db:5432/mlflow' is a "
                               "local store that pods on a cluster cannot reach")


def test_the_containers_get_credentials_endpoints_and_proxies_only():
    environ = {"MLFLOW_TRACKING_PASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "k",
               "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "HTTPS_PROXY": "http://proxy",
               "PFLPIPE_DEBUG": "1", "HOME": "/root", "PATH": "/usr/bin", "TMPDIR": "/tmp/x",
               "VIRTUAL_ENV": "/v"}

    assert passed_environment(environ) == {
        "MLFLOW_TRACKING_PASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "k",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "HTTPS_PROXY": "http://proxy",
        "PFLPIPE_DEBUG": "1"}


# --- the CLI --------------------------------------------------------------------------------------

@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def test_run_refuses_a_path_its_containers_would_not_share_before_anything(work, tmp_path_factory,
                                                                          capsys):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (work / "spec.yaml").write_text(BASE.format(
        results="results", dataset=DIGITS, storage=f"{{kind: local, path: {elsewhere}/ck}}")
        + f"tracking: {{uri: 'sqlite:///{elsewhere}/mlflow.db'}}\n")

    code = main(["run", "spec.yaml", "--runner", "docker"])

    out, err = capsys.readouterr()
    assert code == 2
    lines = err.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["storage.path", "tracking.uri"]
    assert f"{elsewhere}/ck is outside what the docker runner mounts ({work})" in lines[0]
    assert "or track to an MLflow server (one on the host's 127.0.0.1 works" in lines[1]
    assert "Traceback" not in out + err
    assert sorted(p.name for p in work.iterdir()) == ["spec.yaml"]
    assert list(elsewhere.iterdir()) == []


def test_run_without_a_container_engine_says_how_to_start_one(work, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{work}/no-engine.sock")
    (work / "spec.yaml").write_text(BASE.format(results="results", dataset=DIGITS,
                                                storage=LOCAL))

    code = main(["run", "spec.yaml", "--runner", "docker"])

    out, err = capsys.readouterr()
    assert code == 1
    assert err.startswith(f"error: --runner docker: no container engine answers at "
                          f"unix://{work}/no-engine.sock (")
    assert "podman system service --time=0 unix:///tmp/podman.sock &" in err
    assert "Traceback" not in out + err
    assert sorted(p.name for p in work.iterdir()) == ["spec.yaml"]


def test_the_python_api_refuses_an_unknown_runner(work):
    import pflpipe
    from pflpipe.cli import UsageError

    (work / "spec.yaml").write_text(BASE.format(results="results", dataset=DIGITS,
                                                storage=LOCAL))

    with pytest.raises(UsageError, match=r"^runner must be one of subprocess, docker \(got "
                                         r"'dockr'\)$"):
        pflpipe.run("spec.yaml", runner="dockr", quiet=True)
    assert sorted(p.name for p in work.iterdir()) == ["spec.yaml"]


def test_the_docker_runner_mounts_each_directory_at_its_own_path_on_the_hosts_network(
        monkeypatch):
    from pflpipe.pipelines.containers import LABEL, docker_runner

    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw-1234567")
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getgid", lambda: 100)

    runner = docker_runner((WORK, Path("/big/results")), WORK)

    args = runner.container_run_args
    assert [(m["Source"], m["Target"], m["Type"]) for m in args["mounts"]] == [
        ("/work/project", "/work/project", "bind"), ("/big/results", "/big/results", "bind")]
    assert args["working_dir"] == "/work/project" and args["network_mode"] == "host"
    # a rootful engine: the caller's user, with a HOME it may write
    assert args["user"] == "1000:100" and args["environment"]["HOME"] == "/tmp"
    assert args["environment"]["MLFLOW_TRACKING_PASSWORD"] == "pw-1234567"
    assert len(args["labels"][LABEL]) == 32
