"""An entry's random stream comes from its label: reordering the spec's list changes nothing."""

import yaml

from pflpipe.spec import parse_spec
from pflpipe.stages import personalize


def _with_entries(spec, store, *names):
    """The spec with these entries, checkpointing into `store` (so no run resumes another)."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["personalization"] = [{"name": n, "rounds": 2, "warm_start": "none"} for n in names]
    data["storage"] = {"kind": "local", "path": str(store)}
    return parse_spec(yaml.safe_dump(data))


def test_entry_results_do_not_depend_on_its_position_in_the_spec(digits_ds3, tmp_path):
    # Prepare: the same fedper entry second, then first, in the list
    spec, _, root = digits_ds3
    second = _with_entries(spec, tmp_path / "store-second", "ditto", "fedper")
    first = _with_entries(spec, tmp_path / "store-first", "fedper", "ditto")

    # Execute
    for name, variant in (("second", second), ("first", first)):
        personalize.run(variant, 0, "fedper", root / "partition", None, tmp_path / name)

    # Assert
    assert ((tmp_path / "second" / "results.csv").read_text()
            == (tmp_path / "first" / "results.csv").read_text())
