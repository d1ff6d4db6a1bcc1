"""Spec rules of the partition section: optional validation, predefined splits."""

import pytest

from pflpipe.data.client_split import split_sizes
from pflpipe.errors import SpecError
from pflpipe.spec import parse_spec

HEAD = "experiment: {name: t}\ndataset: {name: digits}\n"


def fractions(text: str):
    return parse_spec(HEAD + f"partition: {{strategy: iid, fractions: {text}}}\n"
                      ).partition.fractions


@pytest.mark.parametrize(("given", "expected"), [
    ("{}", (0.6, 0.2, 0.2)),
    ("{train: 0.75, test: 0.25}", (0.75, 0.0, 0.25)),   # given ones sum to 1: val is 0
    ("{train: 0.7, val: 0.1}", (0.7, 0.1, 0.2)),        # else omitted ones take their default
    ("{train: 0.8, val: 0.0, test: 0.2}", (0.8, 0.0, 0.2)),
])
def test_fractions_omitted_ones_are_zero_only_when_the_given_ones_sum_to_one(given, expected):
    result = fractions(given)

    assert (result.train, result.val, result.test) == expected
    assert result.has_validation == (expected[1] > 0)


@pytest.mark.parametrize(("given", "message"), [
    ("{train: 0.8}", "train + val + test must sum to 1 (got 0.8 + 0.2 + 0.2 = 1.2)"),
    ("{val: 0.2, test: 0.8}", "partition.fractions.train: must be greater than 0"),
])
def test_fractions_that_cannot_be_completed_are_errors(given, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("+", r"\+")):
        fractions(given)


def test_split_sizes_without_validation_give_train_and_test_only():
    assert split_sizes(10, 0.0, 0.25) == (7, 0, 3)
    assert split_sizes(2, 0.0, 0.25) == (1, 0, 1)


@pytest.mark.parametrize(("text", "message"), [
    (HEAD + "partition: {strategy: iid, fractions: {train: 0.8, test: 0.2}}\n"
     "federation: {early_stop: {patience: 2}}\n",
     "federation.early_stop: stops on the validation loss, but partition.fractions.val is 0"),
    (HEAD + "partition: {strategy: predefined}\n",
     "partition.path: is required: 'digits' has no per-client splits of its own"),
    ("experiment: {name: t}\ndataset: {name: synthetic}\n"
     "partition: {strategy: predefined, path: s.npz}\n",
     "partition.n_clients: is required: the synthetic dataset is generated per client"),
    (HEAD + "partition: {strategy: predefined, path: s.csv}\n",
     "partition.path: must end in .npz or .json"),
])
def test_spec_rejects_what_cannot_run_without_validation_or_rows(text, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(text)


def test_predefined_partition_needs_no_client_count():
    spec = parse_spec(HEAD + "partition: {strategy: predefined, path: split.npz}\n")

    assert spec.partition.n_clients is None and spec.partition.val_from_train == 0.0
