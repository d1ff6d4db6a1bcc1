"""Compiled pipelines: every example spec compiles, and the KFP IR carries the spec's settings.

The IR is read as KFP writes it: the first YAML document is the pipeline spec (tasks, components,
executors with image and resources), the second the platform spec (kfp-kubernetes: node
selectors, tolerations, secrets per executor).

The golden file ``tests/pipeline/golden/persfl-digits.yaml`` is the compiled quickstart spec. After
an intended change of the pipeline (a component's code, the graph, a spec default), regenerate it
and review the diff before committing::

    PFLPIPE_REGEN_GOLDEN=1 python -m pytest tests/pipeline/test_compile.py -k golden

Only ``sdkVersion`` and kfp's launcher script (the ``sh -ec`` program that runs the component
source) are normalised away before comparing: both change with the installed kfp, not with
pflpipe.
"""

import difflib
import json
import os
from pathlib import Path

import pytest
import yaml
from kfp import components as kfp_components

from pflpipe.cli import main
from pflpipe.pipelines.cache import scoped_spec_json
from pflpipe.pipelines.compiler import compile_pipeline
from pflpipe.spec import parse_spec, read_spec

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden" / "persfl-digits.yaml"

STAGES = ("partition_data", "warm_start_fedavg", "train_local", "personalize",
          "select_teachers", "distill_grid_search", "collect_results", "evaluate_fairness")
# every deterministic stage; collect_results and evaluate_fairness track, so they run every time
CACHED = {"partition_data", "warm_start_fedavg", "train_local", "personalize", "select_teachers",
          "distill_grid_search"}
S3_ENV = {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
          "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}
MINIO_ENV = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}

CPU_IMAGE = "registry.example/team/pflpipe:0.1.0-cpu"
CUDA_IMAGE = "registry.example/team/pflpipe:0.1.0-cuda"
CPU_POOL = {"pool": "cpu"}
GPU_POOL = {"pool": "gpu", "cloud.google.com/gke-accelerator": "nvidia-l4"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

# Every resource field with a value of its own, so a setting lost on the way to the IR shows.
EXPLICIT = f"""\
experiment: {{name: explicit-resources, seeds: [0, 1]}}
dataset: {{name: digits}}
partition: {{strategy: ds1, n_clients: 4, classes_per_client: 4}}
federation: {{rounds: 2}}
personalization:
  - {{name: persfl}}
  - {{name: fedper}}
  - {{name: ditto}}
tracking: {{uri: "http://mlflow.example:5000"}}
storage: {{kind: s3, bucket: pfl-bucket, endpoint_url: "http://minio:9000",
           secret_name: pfl-s3-credentials}}
resources:
  image: {CPU_IMAGE}
  default: {{cpu: 500m, cpu_limit: "1", memory: 1Gi, memory_limit: 2Gi,
             node_selector: {{pool: cpu}}}}
  warm_start_fedavg: &gpu
    gpus: 1
    image: {CUDA_IMAGE}
    cpu: "4"
    cpu_limit: "8"
    memory: 16Gi
    memory_limit: 24Gi
    node_selector: {{pool: gpu, cloud.google.com/gke-accelerator: nvidia-l4}}
    tolerations:
      - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
      - {{key: dedicated, operator: Equal, value: pfl, effect: NoExecute}}
  personalize: *gpu
  distill_grid_search: *gpu
  train_local: {{gpus: 2, image: {CUDA_IMAGE}, node_selector: {{pool: gpu}},
                 tolerations: [{{key: nvidia.com/gpu, operator: Exists}}]}}
"""


# --- reading the IR ------------------------------------------------------------------------------

def load_ir(path: Path) -> tuple[dict, dict]:
    """Return (pipeline spec, kubernetes platform spec per executor; {} when there is none)."""
    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert 1 <= len(docs) <= 2, f"{path}: {len(docs)} YAML documents"
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"] \
        if len(docs) == 2 else {}
    return docs[0], platform


def executor_tasks(ir: dict) -> dict[str, dict]:
    """Return every task that runs a container (not a loop), by stage name, with its executor.

    Each value holds the task (`task`), the container (`container`) and the executor's label
    (`executor`), which keys the platform spec.
    """
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    found = {}
    for dag in dags:
        for name, task in dag["tasks"].items():
            component = ir["components"][task["componentRef"]["name"]]
            if "executorLabel" not in component:
                continue  # a ParallelFor body
            label = component["executorLabel"]
            stage = name.replace("-", "_")
            assert stage not in found, f"two tasks named {name}"
            found[stage] = {"task": task, "executor": label,
                            "container": ir["deploymentSpec"]["executors"][label]["container"]}
    return found


def compile_text(text: str, tmp_path: Path, name: str = "pipeline.yaml") -> tuple[dict, dict]:
    path = compile_pipeline(parse_spec(text), tmp_path / name)
    return load_ir(path)


# --- (a) every example spec ----------------------------------------------------------------------

def test_specs_folder_has_the_examples():
    assert {p.name for p in SPECS} >= {"persfl-digits.yaml", "persfl-cifar10-ds1.yaml"}


@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_cli_compile_writes_kfp_ir_for_every_spec(spec_path, tmp_path, capsys):
    out = tmp_path / "out" / "pipeline.yaml"

    code = main(["compile", str(spec_path), "-o", str(out)])

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert str(out) in captured.out
    spec = read_spec(spec_path)
    ir, _ = load_ir(out)
    assert ir["pipelineInfo"]["name"] == spec.experiment.name
    assert ir["schemaVersion"].startswith("2.")
    assert set(ir["root"]["inputDefinitions"]["parameters"]) == {
        "tracking_uri", "experiment", "parent_run_id", "resume"}
    stages = set(executor_tasks(ir))
    assert stages >= {"partition_data", "warm_start_fedavg", "train_local", "collect_results",
                      "evaluate_fairness"}
    assert ("distill_grid_search" in stages) == spec.has_persfl
    # kfp itself reads the file back as a pipeline.
    loaded = kfp_components.load_component_from_file(str(out))
    assert loaded.name == spec.experiment.name


def test_cli_compile_of_a_bad_spec_exits_2_without_output(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "specs" / "persfl-digits.yaml").read_text()
                   .replace("n_clients: 10", "n_clients: -3"))
    out = tmp_path / "pipeline.yaml"

    code = main(["compile", str(bad), "-o", str(out)])

    assert code == 2
    assert "partition.n_clients" in capsys.readouterr().err
    assert not out.exists()


# --- (b) resources, scheduling, secrets and caching in the IR ------------------------------------

@pytest.fixture(scope="module")
def explicit_ir(tmp_path_factory):
    return compile_text(EXPLICIT, tmp_path_factory.mktemp("explicit"))


def test_ir_has_a_task_per_stage(explicit_ir):
    ir, _ = explicit_ir
    assert set(executor_tasks(ir)) == set(STAGES)


def test_ir_gives_accelerators_only_to_the_training_stages(explicit_ir):
    ir, _ = explicit_ir
    accelerators = {stage: t["container"]["resources"].get("accelerator")
                    for stage, t in executor_tasks(ir).items()}

    gpu = {stage: (acc["resourceType"], acc["resourceCount"])
           for stage, acc in accelerators.items() if acc}
    assert gpu == {"warm_start_fedavg": ("nvidia.com/gpu", "1"),
                   "personalize": ("nvidia.com/gpu", "1"),
                   "distill_grid_search": ("nvidia.com/gpu", "1"),
                   "train_local": ("nvidia.com/gpu", "2")}
    assert accelerators["partition_data"] is None
    assert accelerators["evaluate_fairness"] is None


def test_ir_carries_cpu_and_memory_requests_and_limits(explicit_ir):
    ir, _ = explicit_ir
    resources = {stage: {k: v for k, v in t["container"]["resources"].items()
                         if k.startswith("resource")}
                 for stage, t in executor_tasks(ir).items()}

    gpu_stage = {"resourceCpuRequest": "4", "resourceCpuLimit": "8",
                 "resourceMemoryRequest": "16Gi", "resourceMemoryLimit": "24Gi"}
    default = {"resourceCpuRequest": "500m", "resourceCpuLimit": "1",
               "resourceMemoryRequest": "1Gi", "resourceMemoryLimit": "2Gi"}
    assert resources["warm_start_fedavg"] == gpu_stage
    assert resources["personalize"] == gpu_stage
    assert resources["distill_grid_search"] == gpu_stage
    # train_local sets only GPUs, image and scheduling: CPU and memory come from `default`.
    assert resources["train_local"] == default
    for stage in ("partition_data", "select_teachers", "collect_results", "evaluate_fairness"):
        assert resources[stage] == default, stage


def test_ir_uses_the_image_of_each_stage(explicit_ir):
    ir, _ = explicit_ir
    images = {stage: t["container"]["image"] for stage, t in executor_tasks(ir).items()}

    assert images == {"partition_data": CPU_IMAGE, "warm_start_fedavg": CUDA_IMAGE,
                      "train_local": CUDA_IMAGE, "personalize": CUDA_IMAGE,
                      "select_teachers": CPU_IMAGE, "distill_grid_search": CUDA_IMAGE,
                      "collect_results": CPU_IMAGE, "evaluate_fairness": CPU_IMAGE}


def test_platform_spec_has_node_selectors_and_tolerations_per_executor(explicit_ir):
    ir, platform = explicit_ir
    tasks = executor_tasks(ir)
    selectors = {stage: platform[t["executor"]].get("nodeSelector", {}).get("labels")
                 for stage, t in tasks.items()}
    tolerations = {stage: platform[t["executor"]].get("tolerations")
                   for stage, t in tasks.items()}

    # A stage's node_selector replaces the default's, it is not merged into it.
    assert selectors == {"partition_data": CPU_POOL, "warm_start_fedavg": GPU_POOL,
                         "train_local": {"pool": "gpu"}, "personalize": GPU_POOL,
                         "select_teachers": CPU_POOL, "distill_grid_search": GPU_POOL,
                         "collect_results": CPU_POOL, "evaluate_fairness": CPU_POOL}
    two = [GPU_TOLERATION, {"key": "dedicated", "operator": "Equal", "value": "pfl",
                            "effect": "NoExecute"}]
    assert tolerations == {"partition_data": None, "warm_start_fedavg": two,
                           "train_local": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                           "personalize": two, "select_teachers": None,
                           "distill_grid_search": two, "collect_results": None,
                           "evaluate_fairness": None}


def test_platform_spec_mounts_the_s3_secret_as_env_on_every_stage(explicit_ir):
    ir, platform = explicit_ir
    for stage, t in executor_tasks(ir).items():
        secrets = platform.get(t["executor"], {}).get("secretAsEnv")
        assert secrets and len(secrets) == 1, f"{stage}: {secrets}"
        secret = secrets[0]
        assert secret["secretName"] == "pfl-s3-credentials", stage
        assert {m["secretKey"]: m["envVar"] for m in secret["keyToEnv"]} == S3_ENV, stage


def test_ir_caches_every_stage_but_the_two_that_track(explicit_ir):
    ir, _ = explicit_ir
    caching = {stage: t["task"]["cachingOptions"] for stage, t in executor_tasks(ir).items()}

    # An explicit False is written as an empty cachingOptions (protobuf drops False); a task
    # nobody configured would be cached by default on a cluster.
    assert {stage for stage, opts in caching.items() if opts.get("enableCache")} == CACHED
    for stage, opts in caching.items():
        if stage not in CACHED:
            assert opts == {}, stage


def test_gpu_example_spec_puts_gpus_on_its_gpu_stages_only(tmp_path):
    spec_path = REPO / "specs" / "persfl-cifar10-ds1.yaml"
    ir, platform = load_ir(compile_pipeline(read_spec(spec_path), tmp_path / "p.yaml"))
    tasks = executor_tasks(ir)
    gpu_stages = {"warm_start_fedavg", "personalize", "distill_grid_search"}

    for stage, t in tasks.items():
        resources, k8s = t["container"]["resources"], platform.get(t["executor"], {})
        # the CPU-only stages run on the CPU image
        kind = "cuda" if stage in gpu_stages else "cpu"
        assert t["container"]["image"] == f"ghcr.io/pflpipe/pflpipe:0.1.0-{kind}", stage
        assert resources["resourceCpuRequest"] == "2", stage
        (secret,) = k8s["secretAsEnv"]
        # KFP's MinIO secret holds accesskey/secretkey; they are mounted as boto3's variables
        assert secret["secretName"] == "mlpipeline-minio-artifact", stage
        assert {m["secretKey"]: m["envVar"] for m in secret["keyToEnv"]} == MINIO_ENV, stage
        assert t["task"]["cachingOptions"].get("enableCache", False) == (stage in CACHED), stage
        if stage in gpu_stages:
            assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu", stage
            assert resources["accelerator"]["resourceCount"] == "1", stage
            assert resources["resourceMemoryRequest"] == "16Gi", stage
            assert k8s["nodeSelector"]["labels"] == {
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, stage
            assert k8s["tolerations"] == [GPU_TOLERATION], stage
        else:
            assert "accelerator" not in resources, stage
            assert resources["resourceMemoryRequest"] == "8Gi", stage
            assert "nodeSelector" not in k8s and "tolerations" not in k8s, stage
    assert {"partition_data", "evaluate_fairness"} <= set(tasks) - gpu_stages


def test_spec_without_kubernetes_settings_has_no_platform_spec(tmp_path):
    _, platform = load_ir(compile_pipeline(read_spec(REPO / "specs" / "persfl-digits.yaml"),
                                           tmp_path / "p.yaml"))
    assert platform == {}


# --- (c) cache scoping ---------------------------------------------------------------------------

SCOPED = """\
experiment: {name: scoped, seeds: [0]}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 4, classes_per_client: CLASSES}
federation: {rounds: 2}
personalization:
  - {name: persfl}
  - {name: fedper}
"""


def stage_inputs(ir: dict) -> dict[str, dict]:
    return {stage: t["task"]["inputs"] for stage, t in executor_tasks(ir).items()}


def test_cached_stages_inputs_ignore_added_algorithms_but_not_partition_changes(tmp_path):
    base = SCOPED.replace("CLASSES", "4")
    more_algorithms = base + "  - {name: ditto}\n"
    other_partition = SCOPED.replace("CLASSES", "3")

    ir_base, _ = compile_text(base, tmp_path, "base.yaml")
    ir_more, _ = compile_text(more_algorithms, tmp_path, "more.yaml")
    ir_other, _ = compile_text(other_partition, tmp_path, "other.yaml")

    base_in, more_in, other_in = map(stage_inputs, (ir_base, ir_more, ir_other))
    for stage in CACHED - {"personalize"}:
        assert more_in[stage] == base_in[stage], f"{stage}: an added algorithm changed its key"
        assert other_in[stage] != base_in[stage], f"{stage}: the partition did not reach it"
        assert '"fedper"' not in _spec_json(base_in[stage]), f"{stage} sees the algorithms"
    # a personalize task's spec comes with its loop item and holds its own entry only
    ditto = scoped_spec_json(parse_spec(more_algorithms), "personalize", "ditto")
    assert loop_items(ir_more, "for each algorithm") == [
        *loop_items(ir_base, "for each algorithm"),
        {"label": "ditto", "spec_json": ditto, "shard": ""}]
    fedper = json.loads(loop_items(ir_base, "for each algorithm")[0]["spec_json"])
    assert [e["name"] for e in fedper["personalization"]] == ["fedper"]
    # The added algorithm does reach the stages that run every time.
    assert more_in["collect_results"] != base_in["collect_results"]
    assert "ditto" in _spec_json(more_in["collect_results"])


def test_cached_stages_see_only_the_settings_they_read(tmp_path):
    base = SCOPED.replace("CLASSES", "4")
    ir_base, _ = compile_text(base, tmp_path, "base.yaml")
    ir_eval, _ = compile_text(base + "evaluation: {selection: last_round}\n"
                              "distillation: {epochs: 3}\n", tmp_path, "eval.yaml")

    base_in, eval_in = map(stage_inputs, (ir_base, ir_eval))
    # the evaluation is read by no training stage; the distillation by distill_grid_search only
    for stage in CACHED - {"personalize", "distill_grid_search"}:
        assert eval_in[stage] == base_in[stage], stage
    assert eval_in["distill_grid_search"] != base_in["distill_grid_search"]


def loop_items(ir: dict, name: str) -> list:
    """The constant items of the ParallelFor called `name`."""
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    for dag in dags:
        for task in dag["tasks"].values():
            if task.get("taskInfo", {}).get("name") == name:
                return json.loads(task["parameterIterator"]["items"]["raw"])
    raise AssertionError(f"no loop {name!r}")


def _spec_json(inputs: dict) -> str:
    return inputs["parameters"]["spec_json"]["runtimeValue"]["constant"]


# --- (d) golden IR of the quickstart -------------------------------------------------------------

def normalise(text: str) -> str:
    """Return the IR with what depends on the installed kfp (not on pflpipe) replaced."""
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        if "sdkVersion" in doc:
            doc["sdkVersion"] = "kfp-<version>"
        for executor in doc.get("deploymentSpec", {}).get("executors", {}).values():
            command = executor.get("container", {}).get("command", [])
            if command[:2] == ["sh", "-ec"] and len(command) > 2:
                command[2] = "<kfp launcher script>"
    return yaml.safe_dump_all(_expand_json(docs), sort_keys=True, width=100)


def _expand_json(node):
    """Parse the spec JSON constants, so a diff names the spec field that changed."""
    if isinstance(node, dict):
        return {key: _expand_json(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_expand_json(value) for value in node]
    if isinstance(node, str) and node.startswith("{"):
        try:
            return {"<json>": json.loads(node)}
        except json.JSONDecodeError:
            return node
    return node


def test_golden_ir_of_the_quickstart_spec(tmp_path):
    compiled = compile_pipeline(read_spec(REPO / "specs" / "persfl-digits.yaml"),
                                tmp_path / "persfl-digits.yaml").read_text(encoding="utf-8")
    if os.environ.get("PFLPIPE_REGEN_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(compiled, encoding="utf-8")

    expected, actual = normalise(GOLDEN.read_text(encoding="utf-8")), normalise(compiled)

    if actual != expected:
        changed = _changed_paths(yaml.safe_load_all(expected), yaml.safe_load_all(actual))
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=str(GOLDEN.relative_to(REPO)), tofile="compiled now", n=3))
        pytest.fail("the compiled quickstart pipeline differs from the golden file; if the change "
                    "is intended, regenerate it with PFLPIPE_REGEN_GOLDEN=1 and review the diff.\n"
                    "Changed: " + ", ".join(changed[:10])
                    + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
                    + "\n" + diff, pytrace=False)


def _changed_paths(expected, actual) -> list[str]:
    """Return the dotted paths whose values differ (the diff alone shows no YAML path)."""
    def flat(node, prefix):
        if not isinstance(node, dict):
            return {prefix: node}  # a list counts as one value
        return {k: v for key, value in node.items()
                for k, v in flat(value, f"{prefix}.{key}").items()}

    old = {k: v for i, doc in enumerate(expected) for k, v in flat(doc, f"doc{i}").items()}
    new = {k: v for i, doc in enumerate(actual) for k, v in flat(doc, f"doc{i}").items()}
    return sorted(k for k in old.keys() | new.keys() if old.get(k, ...) != new.get(k, ...))


def test_golden_normalisation_hides_kfp_version_but_not_pflpipe_changes():
    golden = GOLDEN.read_text(encoding="utf-8")
    other_kfp = golden.replace("sdkVersion: kfp-", "sdkVersion: kfp-9.")
    other_image = golden.replace("image: pflpipe:0.1.0-cpu", "image: pflpipe:0.2.0-cpu", 1)

    assert other_kfp != golden
    assert normalise(other_kfp) == normalise(golden)
    assert other_image != golden
    assert normalise(other_image) != normalise(golden)


def test_ir_names_the_loops_after_what_they_iterate(explicit_ir):
    """The KFP UI shows each task's taskInfo.name: "for each seed", not "for-loop-2"."""
    ir, _ = explicit_ir
    dags = [ir["root"]["dag"]] + [c["dag"] for c in ir["components"].values() if "dag" in c]
    names = {task["taskInfo"]["name"] for dag in dags for task in dag["tasks"].values()}

    assert {"for each seed", "for each algorithm"} <= names
    assert not [n for n in names if n.startswith("for-loop")]
    assert loop_items(ir, "for each seed") == [0, 1]
    assert [item["label"] for item in loop_items(ir, "for each algorithm")] == ["fedper", "ditto"]
