"""kfp.local's ParallelFor bug (reference note §1.5) and the workaround pflpipe's pipelines use.

Inside a `dsl.ParallelFor` body, kfp.local 2.17 replaces every *parameter* that comes from the
output of a task outside the loop with the loop item. Pipeline parameters, constants and
*artifacts* from outside the loop arrive intact. So pflpipe's loop bodies receive only loop
items, constants (the spec as JSON) and pipeline parameters (the tracking settings), and its
components pass artifacts only: none has a parameter output.

The first test pins the bug itself; when it fails, a kfp upgrade has fixed the bug (reference note
§1.5 and docs/pipeline.md can then drop the warning).
"""

import json
import sys
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl, local
from kfp.dsl import Artifact, Input, Output

from pflpipe.pipelines import build_pipeline
from pflpipe.spec import read_spec

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.yaml"))
ITEMS = [0, 1, 2]


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def produce(text: str, data: Output[Artifact]) -> str:
    with open(data.path, "w") as handle:
        handle.write(text)
    return text


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def consume(item: int, value: str, data: Input[Artifact]) -> str:
    import json

    with open(data.path) as handle:
        return json.dumps({"item": item, "value": value, "data": handle.read()})


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def gather(from_output: list, from_parameter: list) -> str:
    import json

    return json.dumps({"from_output": from_output, "from_parameter": from_parameter})


@dsl.pipeline(name="parallelfor-bug")
def loop_pipeline(value: str = "pipeline parameter") -> str:
    upstream = produce(text="upstream output")
    with dsl.ParallelFor(ITEMS) as item:
        bitten = consume(item=item, value=upstream.outputs["Output"], data=upstream.outputs["data"])
        spared = consume(item=item, value=value, data=upstream.outputs["data"])
    return gather(from_output=dsl.Collected(bitten.output),
                  from_parameter=dsl.Collected(spared.output)).output


@pytest.fixture(scope="module")
def loop_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kfp")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root / "outputs"),
               workspace_root=str(root / "workspace"), raise_on_error=True)
    result = json.loads(loop_pipeline().output)
    return {key: [json.loads(v) for v in values] for key, values in result.items()}


def test_kfp_local_replaces_an_upstream_parameter_in_a_loop_by_the_loop_item(loop_outputs):
    values = [row["value"] for row in loop_outputs["from_output"]]
    assert "upstream output" not in values, (
        "kfp.local passed an upstream task's output parameter into a ParallelFor body intact: "
        "the bug of reference note §1.5 is fixed in this kfp version")
    assert [float(v) for v in values] == ITEMS


def test_pipeline_parameters_reach_a_loop_body_intact(loop_outputs):
    assert [row["value"] for row in loop_outputs["from_parameter"]] == ["pipeline parameter"] * 3
    assert [row["item"] for row in loop_outputs["from_parameter"]] == ITEMS


def test_upstream_artifacts_reach_a_loop_body_intact(loop_outputs):
    rows = loop_outputs["from_output"] + loop_outputs["from_parameter"]
    assert [row["data"] for row in rows] == ["upstream output"] * 6


def _dags(ir: dict):
    yield ir["root"]["dag"]
    for component in ir["components"].values():
        if "dag" in component:
            yield component["dag"]


@pytest.mark.parametrize("spec_path", SPECS, ids=lambda p: p.stem)
def test_pflpipe_loops_take_no_task_output_parameter(spec_path, tmp_path):
    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(build_pipeline(read_spec(spec_path)), str(path))
    ir = next(yaml.safe_load_all(path.read_text()))

    loops = [(name, task) for dag in _dags(ir) for name, task in dag["tasks"].items()
             if "parameterIterator" in task]
    assert loops, "the pipeline has no ParallelFor"
    for name, task in loops:
        sources = task.get("inputs", {}).get("parameters", {}).values()
        assert not [s for s in sources if "taskOutputParameter" in s], name
    executors_with_parameter_outputs = [
        name for name, component in ir["components"].items()
        if component.get("outputDefinitions", {}).get("parameters")]
    assert executors_with_parameter_outputs == []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, *sys.argv[1:]]))
