"""Random bytes, random YAML and random arrays through `pflpipe validate` and `pflpipe split`.

Whatever comes in, the command ends with exit 0 or a clear error (exit 2): never an "unexpected"
error, never a traceback, never a hang (each example has a deadline) and never a large allocation
(tracemalloc's peak stays under a bound; a "billion laughs" spec used gigabytes).
"""

import tracemalloc

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pflpipe.cli import main

#: Per example: a generous wall-clock deadline (a loaded 2-core machine) and a memory bound.
VALIDATE = settings(max_examples=60, deadline=20_000,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SPLIT = settings(max_examples=20, deadline=60_000,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
#: Peak Python allocation per command (split draws the heatmap: matplotlib's first use is ~90 MiB).
PEAK_BYTES = {"validate": 64 * 2**20, "split": 256 * 2**20}

VALID = {"experiment": {"name": "t", "seeds": [0, 1]}, "dataset": {"name": "digits"},
         "partition": {"strategy": "ds1", "n_clients": 4, "classes_per_client": 2},
         "federation": {"rounds": 2, "lr": 0.05},
         "personalization": [{"name": "ditto", "lam": 0.1}, {"name": "fedper"}]}
KEYS = ["experiment", "dataset", "partition", "name", "strategy", "n_clients", "rounds", "lr",
        "seeds", "personalization", "label", "alpha", "<<", "evaluation", "baselines"]
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["local", "fedavg", "persfl", "natural", "gaussian", "1e3", "0.05"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner,
                                        max_size=4), max_leaves=16)
# Text made of YAML's syntax: anchors, aliases, tags, flow and block collections.
yaml_text = st.lists(st.sampled_from(list("&*!<>[]{}:,-|#'\"\n\t ab01.e") + [
    "&a ", "*a", "!!python/object:os.system ", "<<: ", "experiment:", "  name: t\n"]),
    max_size=200).map("".join)


def run(args: list[str], capsys) -> tuple[int, str]:
    """Run the CLI in-process under tracemalloc; check what every outcome must satisfy."""
    tracemalloc.start()
    try:
        code = main(args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code in (0, 2), err
    assert "error: unexpected" not in err and "Traceback" not in err, err
    assert peak < PEAK_BYTES[args[0]], f"peak {peak / 2**20:.0f} MiB"
    return code, err


@st.composite
def mutated_specs(draw) -> dict:
    """The valid spec with one value replaced by, or one key given, a random value."""
    spec = yaml.safe_load(yaml.safe_dump(VALID))
    section = draw(st.sampled_from(sorted(spec)))
    target = spec[section]
    if isinstance(target, list):
        target = target[draw(st.integers(0, len(target) - 1))]
    key = draw(st.sampled_from(sorted(target)) | st.sampled_from(KEYS))
    target[key] = draw(values)
    return spec


@VALIDATE
@given(data=st.binary(max_size=3000))
def test_validate_random_bytes_is_valid_or_a_clear_error(tmp_path, capsys, data):
    (tmp_path / "spec.yaml").write_bytes(data)

    run(["validate", "-q", str(tmp_path / "spec.yaml")], capsys)


@VALIDATE
@given(text=yaml_text)
def test_validate_random_yaml_syntax_is_valid_or_a_clear_error(tmp_path, capsys, text):
    (tmp_path / "spec.yaml").write_text(text)

    run(["validate", "-q", str(tmp_path / "spec.yaml")], capsys)


@VALIDATE
@given(spec=mutated_specs())
def test_validate_random_values_in_a_spec_are_valid_or_a_clear_error(tmp_path, capsys, spec):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))

    code, err = run(["validate", "-q", str(tmp_path / "spec.yaml")], capsys)

    assert code == 0 or err.startswith(f"{tmp_path / 'spec.yaml'}:"), err


def split_spec(tmp_path, file: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(f"experiment: {{name: t, output_dir: {tmp_path}/out}}\ndataset: {{name: "
                    f"arrays, root: {tmp_path}, path: {file}}}\npartition: {{strategy: iid, "
                    "n_clients: 2, min_samples: 3}\n")
    return str(path)


@SPLIT
@given(data=st.binary(max_size=4000), suffix=st.sampled_from([".npz", ".pt"]))
def test_split_random_bytes_as_data_file_is_a_clear_error(tmp_path, capsys, data, suffix):
    (tmp_path / f"d{suffix}").write_bytes(data)

    code, err = run(["split", split_spec(tmp_path, f"d{suffix}")], capsys)

    assert code == 2 and f"{tmp_path}/d{suffix}: " in err


dtypes = st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_, np.complex64,
                          np.dtype("<U2")])


@st.composite
def arrays_files(draw) -> dict[str, np.ndarray]:
    """x of a random dtype and shape; y mostly as long as x, with labels from -1 to 5."""
    n = draw(st.integers(0, 12))
    shape = draw(st.sampled_from([(n,), (n, 3), (n, 2, 2), (n, 1, 2, 2), (), (n, 1, 1, 1, 1)]))
    elements = {"allow_nan": True, "allow_infinity": True} if draw(st.booleans()) else None
    dtype = draw(dtypes)
    x = draw(hnp.arrays(dtype, shape, elements=st.floats(**elements)
                        if elements and dtype in (np.float32, np.float64) else None))
    length = draw(st.sampled_from([n, n, n, max(n - 1, 0)]))
    y = draw(hnp.arrays(np.int64, length, elements=st.integers(-1, 5)))
    return {"x": x, "y": y}


@SPLIT
@given(arrays=arrays_files())
def test_split_random_arrays_are_split_or_a_clear_error(tmp_path, capsys, arrays):
    np.savez(tmp_path / "d.npz", **arrays)

    run(["split", split_spec(tmp_path, "d.npz"), "--rows", "0"], capsys)


@settings(max_examples=200, deadline=5_000)
@given(text=st.from_regex(r"[-+]?[0-9]{1,3}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,2})?", fullmatch=True)
       | st.floats(allow_nan=False, allow_infinity=False).map(repr)
       | st.text(alphabet="0123456789.eE+-_", min_size=1, max_size=8))
def test_set_reads_a_value_exactly_as_the_file_does(text):
    """`--set PATH=VALUE` and `PATH: VALUE` in the file give the same value, or both no number."""
    from pflpipe.spec.loader import parse_yaml
    from pflpipe.spec.overrides import parse_assignments

    try:
        from_file = parse_yaml(f"value: {text}\n")[0]["value"]
    except Exception:  # noqa: BLE001 - the file refuses it: --set must refuse it too
        from_file = "refused"
    try:
        from_set = parse_assignments([f"x={text}"])["x"]
    except Exception:  # noqa: BLE001
        from_set = "refused"

    assert from_set == from_file or (from_set != from_set and from_file != from_file)
