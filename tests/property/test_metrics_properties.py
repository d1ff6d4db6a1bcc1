"""Invariants of the metrics: bounds of JI, CS and Entropy; invariance to the client order."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pflpipe.metrics import (
    METRIC_REGISTRY,
    cosine_similarity,
    entropy,
    jain_index,
    quantum_of_improvement,
    summarize,
    table_from_records,
)

SETTINGS = settings(max_examples=60, deadline=None)
# Accuracy-like values on a 1/1000 grid: distinct values differ enough to be told apart.
GRID = st.integers(min_value=0, max_value=1000).map(lambda k: k / 1000)
POSITIVE = st.lists(st.integers(1, 1000).map(lambda k: k / 1000), min_size=1, max_size=40)
NON_NEGATIVE = st.lists(GRID, min_size=1, max_size=40).filter(any)


@SETTINGS
@given(POSITIVE)
def test_jain_index_is_between_one_over_k_and_one_for_positive_values(values):
    ji = jain_index(np.array(values))
    assert 1 / len(values) <= ji <= 1


@SETTINGS
@given(POSITIVE)
def test_jain_index_is_one_iff_all_values_are_equal(values):
    assert (jain_index(np.array(values)) == 1.0) == (len(set(values)) == 1)


@SETTINGS
@given(NON_NEGATIVE)
def test_cosine_similarity_is_at_most_one(values):
    assert 0 < cosine_similarity(np.array(values)) <= 1


@SETTINGS
@given(NON_NEGATIVE)
def test_entropy_is_between_zero_and_log_k(values):
    assert 0 <= entropy(np.array(values)) <= math.log(len(values))


@SETTINGS
@given(NON_NEGATIVE)
def test_jain_index_is_the_square_of_cosine_similarity(values):
    array = np.array(values)
    assert math.isclose(jain_index(array), cosine_similarity(array) ** 2, rel_tol=1e-12)


@SETTINGS
@given(st.lists(st.integers(-1000, 1000).map(lambda k: k / 1000), min_size=1, max_size=40),
       st.randoms(use_true_random=False))
def test_every_metric_is_invariant_to_client_order(values, rng):
    # each client a value and a sample count (1-13), moved together
    clients = [(v, 1 + 7 * i % 13) for i, v in enumerate(values)]
    shuffled = list(clients)
    rng.shuffle(shuffled)
    reads = {"distribution": lambda c: [abs(v) for v, _ in c],
             "accuracy_and_samples": lambda c: [[v, n] for v, n in c]}
    for metric in METRIC_REGISTRY.values():
        view = reads.get(metric.reads, lambda c: [v for v, _ in c])
        assert metric.compute(view(clients)) == metric.compute(view(shuffled)), metric.name


@st.composite
def tables(draw):
    """A table of 1-8 clients and 1-3 seeds: local, fedavg and two personalized models."""
    n_clients, seeds = draw(st.integers(1, 8)), draw(st.integers(1, 3))
    rows = [{"seed": s, "client": c, "model": m, "accuracy": draw(GRID)}
            for s in range(seeds) for c in range(n_clients)
            for m in ("local", "fedavg", "x", "y")]
    return rows


@SETTINGS
@given(tables(), st.randoms(use_true_random=False))
def test_summary_is_invariant_to_row_order_and_client_names(rows, rng):
    shuffled = list(rows)
    rng.shuffle(shuffled)
    # Renaming clients changes their sort order too.
    renamed = [{**row, "client": f"c{99 - row['client']}"} for row in shuffled]
    first = summarize(table_from_records(rows))["test"]
    second = summarize(table_from_records(renamed))["test"]
    for model, result in first.models.items():
        assert result.mean == second.models[model].mean
        assert result.std == second.models[model].std
    assert (first.best, first.fairest) == (second.best, second.fairest)


@SETTINGS
@given(tables())
def test_qoi_partitions_clients_into_improved_decreased_and_unchanged(rows):
    split = summarize(table_from_records(rows))["test"]
    x = split.models["x"].mean
    assert 0 <= x["performance.PUI"] + x["performance.PUD"] <= 100 + 1e-9  # means over seeds
    assert x["performance.APD"] is None or x["performance.APD"] < 0
    assert x["performance.API"] is None or x["performance.API"] > 0


@SETTINGS
@given(st.lists(st.tuples(GRID, GRID, GRID), min_size=1, max_size=20))
def test_qoi_is_never_above_either_baseline_gap(triples):
    p, g, loc = (np.array(v) for v in zip(*triples, strict=True))
    qoi = quantum_of_improvement(p, g, loc)
    assert (qoi <= p - g).all() and (qoi <= p - loc).all()
