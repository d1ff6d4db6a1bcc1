"""Invariants of a sweep's points, over random sweeps of valid settings.

Whatever the values: the points are the Cartesian product (their count is the product of the
lists' lengths), every label is distinct, and each point's spec holds exactly its values at the
swept paths and the base spec's everywhere else.
"""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pflpipe.spec import parse_spec
from pflpipe.spec.sweep import points

BASE = """\
experiment: {name: t}
dataset: {name: digits}
partition: {strategy: ds2, n_clients: 4, alpha: 0.5}
personalization: [{name: ditto}]
"""
#: Swept paths, a strategy of valid values each, and where the value is in the point's spec.
PATHS = {
    "partition.alpha": (st.floats(0.01, 100, allow_nan=False), lambda s: s.partition.alpha),
    "federation.rounds": (st.integers(1, 50), lambda s: s.federation.rounds),
    "personalization.ditto.lam": (st.floats(0, 10, allow_nan=False),
                                  lambda s: s.personalization[0].lam),
}


@st.composite
def sweeps(draw) -> dict[str, list]:
    keys = draw(st.lists(st.sampled_from(sorted(PATHS)), min_size=1, max_size=3, unique=True))
    return {key: draw(st.lists(PATHS[key][0], min_size=1, max_size=3, unique=True))
            for key in keys}


@settings(max_examples=25, deadline=None)
@given(sweeps())
def test_points_are_the_product_with_distinct_labels_and_exactly_their_values(sweep):
    text = BASE + "sweep:\n" + "".join(f"  {k}: {v!r}\n" for k, v in sweep.items())
    base = parse_spec(BASE)

    found = points(parse_spec(text))

    assert len(found) == math.prod(len(v) for v in sweep.values())
    assert len({p.label for p in found}) == len(found)
    assert {tuple(p.overrides.items()) for p in found} == {
        tuple(zip(sweep, values, strict=True)) for values in itertools.product(
            *sweep.values())}
    for point in found:
        for key, read in ((k, PATHS[k][1]) for k in PATHS):
            assert read(point.spec) == point.overrides.get(key, read(base))
