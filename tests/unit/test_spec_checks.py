"""What `validate` checks past the schema: the model (custom path, parameter count against
memory) and the plausibility of class counts inferred from labels."""

import numpy as np
import pytest

from pflpipe.data.files import check_labels
from pflpipe.errors import DataError, SpecError
from pflpipe.models import check
from pflpipe.spec import parse_spec

SPEC = """\
experiment: {name: t}
dataset: {name: digits}
partition: {strategy: iid, n_clients: 10}
"""


def test_parameter_count_is_the_built_models():
    spec = parse_spec(SPEC + "model: {architecture: mlp, hidden: [100]}\n")

    # digits: 64 features → 100 → 10 classes: 64·100 + 100 + 100·10 + 10
    assert check.count_parameters(spec.model, (1, 8, 8), 10) == 7510


def test_memory_bound_names_the_field_and_counts_clients_per_worker(monkeypatch):
    spec = parse_spec(SPEC + "model: {architecture: mlp, hidden: [100]}\n")
    # 7510 parameters × 4 bytes × (4 copies × 10 clients + 1) = 1,231,640 bytes
    monkeypatch.setattr(check, "physical_memory", lambda: 1_231_639)

    with pytest.raises(SpecError, match=r"model.hidden: the model has 7,510 parameters; 10 "
                                        "clients' copies"):
        check.check_model(spec)

    monkeypatch.setattr(check, "physical_memory", lambda: 1_231_640)
    check.check_model(spec)  # exactly fits
    monkeypatch.setattr(check, "physical_memory", lambda: 1_000_000)
    check.check_model(parse_spec(SPEC + "model: {architecture: mlp, hidden: [100]}\n"
                                 "engine: {workers: 2}\n"))  # 5 clients per process fit


def test_custom_model_path_resolves_to_a_module_subclass():
    from torch import nn

    assert check.resolve_custom("torch.nn:Linear") is nn.Linear
    with pytest.raises(SpecError, match="'torch:tensor' is a builtin_function_or_method, not a "
                                        "subclass of torch.nn.Module"):
        check.resolve_custom("torch:tensor")


@pytest.mark.parametrize("labels", [
    np.arange(100).repeat(2),          # every class of 100 present
    np.arange(1, 11).repeat(3),        # 1-based labels: class 0 never seen
    np.array([0, 3, 7, 9] * 5),        # 6 of 10 classes never seen, but at most 10
])
def test_plausible_inferred_class_counts_pass(labels, tmp_path):
    y, n_classes = check_labels(tmp_path / "d.npz", labels)

    assert n_classes == labels.max() + 1 and y.dtype == np.int64


def test_labels_that_are_ids_are_refused_unless_the_classes_are_declared(tmp_path):
    labels = np.array([0, 1, 2, 40] * 3)

    with pytest.raises(DataError, match="the largest label is 40, so 41 classes would be "
                                        "inferred, but only 4 distinct labels appear in 12 "
                                        r"samples \(37 classes never seen\)"):
        check_labels(tmp_path / "d.npz", labels)
    assert check_labels(tmp_path / "d.npz", labels, n_classes=41)[1] == 41


def test_a_stage_checks_with_its_datas_shape_and_clients(monkeypatch):
    spec = parse_spec("experiment: {name: t}\ndataset: {name: arrays, path: d.npz}\n"
                      "partition: {strategy: iid, n_clients: 10}\n"
                      "model: {architecture: mlp, hidden: [10]}\n")
    # 5 features → 10 → 3 classes: 5·10 + 10 + 10·3 + 3 = 93 parameters; 2 clients: 93·4·9 bytes
    monkeypatch.setattr(check, "physical_memory", lambda: 93 * 4 * 9 - 1)

    check.check_model(spec)  # validate alone cannot know the arrays' shape: nothing to check
    with pytest.raises(SpecError, match="model.hidden: the model has 93 parameters; 2 clients'"):
        check.check_model(spec, (5,), 3, clients=2)
