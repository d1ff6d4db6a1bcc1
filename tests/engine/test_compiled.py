"""engine.compile: compiled steps equal the sequential reference; what does not compile falls back.

Compiling costs tens of seconds per graph on a 2-core CPU, so these tests compile one graph; the
batched == sequential tests of every algorithm (several buckets) run compiled with
PFLPIPE_TEST_COMPILE=1.
"""

import logging
import re

import pytest
import torch
from torch._dynamo.utils import counters

from pflpipe.engine.compiled import CompiledTrainer, bucket, compile_options
from pflpipe.engine.data import member_seed
from pflpipe.engine.optim import OptimizerConfig, StackedOptimizer
from pflpipe.engine.trainer import BatchedTrainer, Job, SequentialTrainer
from pflpipe.engine.tree import broadcast
from pflpipe.spec import SpecError, parse_spec
from pflpipe.training import stage_setup

#: 9 members take both steps; the member with no step is never stepped.
#: One graph only: compiling one costs ~20 s of CPU (more graphs: PFLPIPE_TEST_COMPILE=1).
STEPS = torch.tensor([2, 2, 2, 0, 2, 2, 2, 2, 2, 2])
#: ds3-like skew: 10, 9, 8, 6, 4, 3 and 1 members active over the steps (the last one padded).
SKEWED = torch.tensor([7, 1, 3, 2, 0, 5, 4, 3, 1, 2])


def _counting_objective(state, batch, shared, hp, ctx):
    """Task loss plus a constant draw of engine noise; counts the member's steps in `seen`."""
    noise = ctx.normal(batch["key"], (2,)).sum()
    loss = hp["weight"] * ctx.task_loss(state["model"], batch) + 1e-3 * noise
    return loss, {"seen": {"steps": state["seen"]["steps"] + 1}}


def _job(ds3, objective, steps=STEPS):
    _, s = ds3
    n = s.data.n_clients
    seen = {"steps": torch.zeros(n, device=s.device)}
    return Job(state={"model": broadcast(s.init, n), "seen": seen},
               train=("model",), objective=objective, data=s.data.train, clients=torch.arange(n),
               steps=steps, lr={"model": torch.linspace(0.02, 0.2, n)}, batch_size=16,
               seeds=[member_seed(0, c) for c in range(n)], hp={"weight": torch.full((n,), 0.5)},
               optimizer=OptimizerConfig(momentum=0.9, weight_decay=1e-3))


def _max_diff(a, b):
    return max((a[g][k] - b[g][k]).abs().max().item() for g in a for k in a[g])


def test_compiled_steps_equal_sequential_and_leave_padded_members_untouched(ds3):
    job = _job(ds3, _counting_objective)
    ctx = ds3[1].ctx

    compiled = CompiledTrainer(ctx).train(job)
    sequential = SequentialTrainer(ctx).train(job)

    assert compiled.state["seen"]["steps"].tolist() == STEPS.float().tolist()
    assert _max_diff(compiled.state, sequential.state) < 1e-5
    assert torch.allclose(compiled.loss, sequential.loss, atol=1e-5)
    untouched = {k: v[3] for k, v in compiled.state["model"].items()}  # 0 steps, padded in
    assert all(torch.equal(untouched[k], ds3[1].init[k]) for k in untouched)
    assert compiled.bad_step.tolist() == [-1] * job.members


def test_skewed_step_counts_compile_one_graph_and_equal_sequential(ds3):
    job = _job(ds3, _counting_objective, steps=SKEWED)
    ctx = ds3[1].ctx
    graphs, notes = counters["stats"]["unique_graphs"], []

    compiled = CompiledTrainer(ctx, on_compile=notes.append).train(job)
    sequential = SequentialTrainer(ctx).train(job)

    # one graph for every member count (none when an earlier test's serves: dynamo's cache)
    assert counters["stats"]["unique_graphs"] - graphs <= 1
    assert len(notes) == counters["stats"]["unique_graphs"] - graphs   # its cost is told
    assert all(re.fullmatch(r"engine.compile: compiled the step of _counting_objective \(9 "
                            rf"members, {ds3[1].device.type}\) in \d+\.\d s", n)
               for n in notes)   # 9: the members of the step that compiled (one takes none)
    assert compiled.state["seen"]["steps"].tolist() == SKEWED.float().tolist()
    assert _max_diff(compiled.state, sequential.state) < 1e-5
    assert torch.allclose(compiled.loss, sequential.loss, atol=1e-5)
    untouched = {k: v[4] for k, v in compiled.state["model"].items()}  # 0 steps
    assert all(torch.equal(untouched[k], ds3[1].init[k]) for k in untouched)


def test_cuda_graphs_only_on_cuda():
    assert compile_options(torch.device("cuda")) == {"mode": "reduce-overhead"}
    assert compile_options(torch.device("cpu")) == {}


def test_a_lone_last_member_steps_beside_one_padded_member():
    assert [bucket(k, 10) for k in (10, 7, 2, 1)] == [10, 7, 2, 2]
    assert bucket(1, 1) == 1


def _breaking_objective(state, batch, shared, hp, ctx):
    torch._dynamo.graph_break()   # fullgraph compilation refuses this
    return ctx.task_loss(state["model"], batch)


def test_a_step_that_does_not_compile_runs_eagerly_with_a_logged_reason(ds3, caplog):
    job = _job(ds3, _breaking_objective, steps=torch.full((10,), 2))
    ctx = ds3[1].ctx

    trainer = CompiledTrainer(ctx)
    with caplog.at_level(logging.WARNING, logger="pflpipe.engine.compiled"):
        first = trainer.train(job)    # the step function, eagerly
        second = trainer.train(job)   # the BatchedTrainer
    eager = BatchedTrainer(ctx).train(job)

    assert len(caplog.records) == 1   # once per objective, not per step or job
    assert ("engine.compile: the step of _breaking_objective did not compile (" in caplog.text
            and "graph_break" in caplog.text and "it runs eagerly" in caplog.text)
    assert _max_diff(first.state, eager.state) < 1e-6
    assert torch.allclose(first.loss, eager.loss, atol=1e-6)
    assert _max_diff(second.state, eager.state) == 0.0


@pytest.mark.parametrize("config", [OptimizerConfig(momentum=0.9, weight_decay=0.1),
                                    OptimizerConfig(name="adam", weight_decay=0.1)],
                         ids=["momentum", "adam"])
def test_optimizer_step_number_may_be_a_tensor(config):
    """A compiled step passes its number as a 0-d tensor; the update is the same."""
    grad = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))   # members 0 and 1
    results = []
    for step in (4, torch.tensor(4)):
        params = [torch.ones(3, 4)]
        optimizer = StackedOptimizer(config, params, [torch.tensor([0.1, 0.2, 0.3])])
        optimizer.step(2, [grad], step)
        results.append(params[0])

    assert torch.allclose(results[0], results[1], atol=1e-7)
    assert torch.equal(results[0][2], torch.ones(4))   # member 2 was not active


SPEC = """\
experiment: {name: compile-spec}
dataset: {name: digits}
partition: {strategy: iid, n_clients: 3}
engine: {device: cpu, compile: COMPILE}
"""


def test_engine_compile_takes_true_false_or_auto_and_names_the_field():
    assert parse_spec(SPEC.replace("COMPILE", "true")).engine.compile is True
    assert parse_spec(SPEC.replace("COMPILE", "auto")).engine.compile == "auto"

    with pytest.raises(SpecError, match="engine.compile"):
        parse_spec(SPEC.replace("COMPILE", "sometimes"))


def test_auto_compiles_no_quickstart_stage_and_compiled_checkpoints_have_their_own_key(ds3):
    spec, s = ds3
    auto = parse_spec(SPEC.replace("COMPILE", "auto"))
    forced = parse_spec(SPEC.replace("COMPILE", "true"))

    assert stage_setup.use_compile(auto, s.data, s.device) is False   # 3 rounds on digits: seconds
    assert stage_setup.use_compile(forced, s.data, s.device) is True
    compiled = stage_setup.Setup(s.data, s.ctx, s.trainer, s.init, s.head, s.partition_hash,
                                 s.device, compiled=True)
    assert stage_setup.engine_key(spec, compiled) == {**stage_setup.engine_key(spec, s),
                                                      "compile": True}
