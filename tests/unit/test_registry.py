"""One-place registration: what the spec accepts, what the registry runs and what the pipeline
schedules are derived from the same params models and algorithm files, and agree."""

import inspect
import re
import typing

import pytest

import pflpipe.algorithms.algorithm as base
from pflpipe.algorithms import REGISTRY, Algorithm, build
from pflpipe.spec import parse_spec
from pflpipe.spec.algorithms import PARAMS, PERSONALIZE, Params
from pflpipe.spec.spec import Spec
from pflpipe.stages.personalize import stream_of

SPEC = """\
experiment: {name: registry}
dataset: {name: digits}
partition: {strategy: ds1, n_clients: 4}
"""


def test_every_params_model_runs_somewhere():
    # Prepare: the stages that run entries, and what decides which
    stages = {"personalize", "train_local", "distill_grid_search"}

    # Assert: every algorithm the spec accepts has a stage, and a registered algorithm unless a
    # stage of its own runs it (PersFL's teachers and distillation)
    for name, cls in PARAMS.items():
        assert cls.stage in stages, name
        assert name in REGISTRY or cls.stage == "distill_grid_search", name
    assert set(PERSONALIZE) == {n for n, c in PARAMS.items() if c.stage == "personalize"}


def test_every_registered_algorithm_is_a_spec_choice_with_its_own_params_model():
    for name, cls in REGISTRY.items():
        assert name in PARAMS, name
        assert cls.params_type() is PARAMS[name], name
        assert cls.__module__ == f"pflpipe.algorithms.{name}", name


def test_spec_union_is_the_params_registry():
    union = typing.get_args(typing.get_args(Spec.model_fields["personalization"].annotation)[0])[0]
    assert set(typing.get_args(union)) == set(PARAMS.values())


def test_every_personalization_entry_validates_and_builds():
    # Prepare: a spec listing every algorithm of the personalize stage
    entries = "".join(f"  - {{name: {name}}}\n" for name in PERSONALIZE)
    spec = parse_spec(SPEC + "personalization:\n" + entries)

    # Execute / Assert
    for entry in spec.personalization:
        algorithm = build(entry, head=frozenset(), federation=spec.federation)
        assert isinstance(algorithm, REGISTRY[entry.name])


def test_an_algorithm_whose_clients_train_alone_sends_nothing_and_the_others_do():
    # Prepare: every registered algorithm with a base key and a head key
    entries = "".join(f"  - {{name: {name}}}\n" for name in REGISTRY)
    spec = parse_spec(SPEC + "personalization:\n" + entries)
    alone = {}

    # Execute: what each would send of the network, and whether its server step is FedAvg's
    for entry in spec.personalization:
        algorithm = build(entry, head=frozenset({"head.weight"}), federation=spec.federation)
        sends = any(algorithm.is_payload(k) for k in ("body.weight", "head.weight"))
        alone[entry.name] = not sends and type(algorithm).server_step is Algorithm.server_step

    # Assert: `clients_train_alone` (the entries run as client shards) says exactly that
    assert alone == {entry.name: entry.clients_train_alone for entry in spec.personalization}
    assert {name for name, train_alone in alone.items() if train_alone} == {"fedavg_ft", "local"}


def test_build_of_an_unregistered_name_names_the_missing_registration():
    class Orphan(Params):
        name: typing.Literal["orphan"] = "orphan"

    with pytest.raises(KeyError, match="no algorithm is registered under 'orphan'"):
        build(Orphan(), head=frozenset(), federation=parse_spec(SPEC).federation)


def test_hook_table_in_base_lists_every_hook():
    # Prepare: the hooks are Algorithm's public methods and its class attributes
    hooks = {name for name, _ in inspect.getmembers(Algorithm, inspect.isfunction)
             if not name.startswith("_")}
    hooks -= {"task_objective"}            # an objective phases may name, not a hook
    hooks |= {"kept", "predict_with"}

    # Execute
    documented = set(re.findall(r"``(\w+)``", base.__doc__))

    # Assert
    assert hooks <= documented, sorted(hooks - documented)


def test_entry_stream_depends_on_its_label_not_its_position():
    assert stream_of("ditto") == stream_of("ditto")
    assert stream_of("ditto") != stream_of("ditto-strong")
    assert stream_of("ditto") > 0            # stream 0 is the warm start's
