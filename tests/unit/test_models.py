"""The 6-layer CNN of pFedVEM (CIFAR-100, SUN397): shapes, size and head."""

import pytest
import torch

from pflpipe.models import build_model, head_keys
from pflpipe.spec import parse_spec

SPEC = """\
experiment: {name: m}
dataset: {name: cifar100, root: data}
partition: {strategy: concept_drift, n_clients: 50}
model: {architecture: cnn6}
"""


@pytest.mark.parametrize(("side", "classes"), [(32, 20), (64, 3)])
def test_cnn6_maps_images_to_class_logits_through_100_features(side, classes):
    spec = parse_spec(SPEC)
    model = build_model(spec.model, (3, side, side), classes, seed=0)

    logits = model(torch.zeros(1, 3, side, side))

    assert logits.shape == (1, classes)
    assert model.head.in_features == 100
    assert head_keys(model, spec.model) == {"head.weight", "head.bias"}


def test_cnn6_has_the_papers_parameter_count():
    # convolutions 3→32, 32→64, 64→128, 128→256, 256→100 (3×3 + bias), head 100→20:
    # 896 + 18,496 + 73,856 + 295,168 + 230,500 + 2,020 (the head: pFedVEM's d for CIFAR-100)
    model = build_model(parse_spec(SPEC).model, (3, 32, 32), 20, seed=0)

    assert sum(p.numel() for p in model.parameters()) == 620_936
    assert sum(p.numel() for p in model.head.parameters()) == 2_020
