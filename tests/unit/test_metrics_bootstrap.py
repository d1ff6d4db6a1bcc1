"""The one-seed bootstrap computed over a [resamples, clients] matrix gives today's numbers.

`pflpipe.metrics.resampled.replicates` computes every metric on every client resample at once;
it must equal one `summary.score` call per resample (`scalar_replicates`) to the last bit, and
the report's intervals, p-values and verdicts must equal those recorded at base commit 1f2e09b
(`golden/bootstrap.json`, from the scalar code: see `bootstrap_tables.py`).
"""

import json

import numpy as np
import pytest
from bootstrap_tables import GOLDEN, TABLES, assessed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pflpipe.metrics.performance import quantum_of_improvement
from pflpipe.metrics.resampled import replicates, scalar_replicates, vectorized
from pflpipe.metrics.summary import PATHS
from pflpipe.metrics.uncertainty import client_resamples

RECORDED = json.loads((GOLDEN / "bootstrap.json").read_text())


#: The verdicts and the pairs' intervals at the procedure of issue 46 (a pair's interval is the one
#: its test inverts), recorded after it and after the vectorized bootstrap.
VERDICTS = json.loads((GOLDEN / "bootstrap-verdicts.json").read_text())


@pytest.mark.parametrize("name", sorted(TABLES))
def test_model_intervals_equal_those_recorded_before_and_verdicts_those_recorded_since(name):
    # JSON floats round-trip exactly: equality here is equality of every bit
    now = json.loads(json.dumps(assessed(name)))
    for split, assessment in now.items():
        before = RECORDED[name][split]
        for key in ("over", "n", "level", "alpha", "resamples"):
            assert assessment[key] == before[key]
        for model, intervals in assessment["intervals"].items():
            for metric, interval in intervals.items():
                was = before["intervals"][model][metric]
                if was["low"] is not None and was["low"] == was["high"]:
                    # a zero-width interval from no spread is no interval since issue 46
                    assert (interval["low"], interval["high"]) == (None, None), (model, metric)
                    assert interval["reason"]
                else:
                    assert interval == was, (model, metric)
        assert {k: assessment[k] for k in ("verdicts", "baselines")} == VERDICTS[name][split]


def test_the_quickstart_golden_holds_what_its_report_answered():
    test = RECORDED["quickstart"]["test"]
    assert test["over"] == "clients" and test["n"] == 10 and test["resamples"] == 1000
    assert test["verdicts"]["best"]["top"] == ["fedper", "persfl"]
    assert test["verdicts"]["fairest"]["top"] == ["persfl", "fedper"]


def assert_same(vectorized: dict, scalar: dict) -> None:
    assert list(vectorized) == list(scalar) == list(PATHS)
    for path in PATHS:
        np.testing.assert_array_equal(vectorized[path], scalar[path], err_msg=path, strict=True)


def inputs(seed: int, clients: int, *, errors=False, baseline=False, samples=True,
           same=False, zeros=False):
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 60, size=clients)
    g, local = (rng.binomial(n, rng.uniform(0.3, 1)) / n for _ in range(2))
    accuracy = g.copy() if same else np.zeros(clients) if zeros else \
        rng.binomial(n, rng.uniform(0.3, 1)) / n
    if errors:
        accuracy, g, local = (-rng.gamma(2.0, 0.1, size=clients) for _ in range(3))
    qoi = None if baseline else quantum_of_improvement(accuracy, g, local)
    return accuracy, qoi, n if samples else None, client_resamples(clients, 200, seed)


CASES = {
    "10 clients": inputs(0, 10),
    "1 client": inputs(1, 1),
    "2 clients": inputs(2, 2),
    "baseline": inputs(3, 17, baseline=True),
    "no sample counts": inputs(4, 23, samples=False),
    "regression": inputs(5, 12, errors=True),
    "equal to the global model": inputs(6, 8, same=True),   # U⁺ and U⁻ empty
    "every accuracy 0": inputs(7, 9, zeros=True),           # accuracy fairness undefined
    "40 clients": inputs(8, 40),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_metric_on_every_resample_equals_the_scalar_reference(case):
    accuracy, qoi, samples, resamples = CASES[case]
    errors = case == "regression"
    assert_same(replicates(accuracy, qoi, samples, resamples, errors=errors),
                scalar_replicates(accuracy, qoi, samples, resamples, errors=errors))
    # every metric of the report has its matrix form: none falls back to a loop over resamples
    assert set(vectorized(accuracy, qoi, samples, resamples, errors=errors)) == set(PATHS)


def test_undefined_values_are_nan_where_score_gives_none():
    accuracy, qoi, samples, resamples = CASES["equal to the global model"]
    out = replicates(accuracy, qoi, samples, resamples)
    assert np.isnan(out["fairness.improved.JI"]).all() and np.isnan(out["performance.MPD"]).all()
    assert (out["performance.PUI"] == 0.0).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40), st.integers(0, 40),
                          st.integers(0, 40)), min_size=1, max_size=25),
       st.integers(0, 2**32 - 1), st.booleans())
def test_vectorized_equals_scalar_on_any_table(clients, seed, errors):
    # accuracies k/n of n samples (ties and exact zeros are common, as in a real table)
    n = np.array([c[1] for c in clients])
    p, g, local = (np.minimum(np.array([c[i] for c in clients]), n) / n for i in (0, 2, 3))
    if errors:
        p, g, local = -p, -g, -local
    resamples = client_resamples(len(clients), 50, seed)
    qoi = quantum_of_improvement(p, g, local)
    assert_same(replicates(p, qoi, n, resamples, errors=errors),
                scalar_replicates(p, qoi, n, resamples, errors=errors))
