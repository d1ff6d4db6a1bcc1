"""Per-client files hold their own client's weights only, whatever the number of clients.

A client's state_dict is built from slices of the engine's stacked [C, ...] tensors, and
torch.save writes a view's whole storage: without a copy each client file held every client's
weights (issue 50), so a run's disk grew with the square of its clients.
"""

import io
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pflpipe import layout
from pflpipe.data.files import own_storage
from pflpipe.engine import checkpoint
from pflpipe.storage.local_dir import LocalStore
from pflpipe.training.results_files import client_models, write_results

#: The default MLP's shapes on the synthetic dataset (60 features, 10 classes), and a kept group.
SHAPES = {"base.1.weight": (64, 60), "base.1.bias": (64,), "head.weight": (10, 64),
          "head.bias": (10,)}
OWN_BYTES = sum(torch.Size(shape).numel() * 4 for shape in SHAPES.values())


def _stacked(n_clients: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    model = {key: torch.randn(n_clients, *shape, generator=generator)
             for key, shape in SHAPES.items()}
    return {"model": model, "personal": {k: v * 2 for k, v in model.items()}}


def _load(path) -> dict:
    return torch.load(path, weights_only=True)


def _storage_bytes(state: dict) -> list[tuple[int, int]]:
    """(storage bytes, own bytes) of every tensor of a loaded state_dict."""
    return [(v.untyped_storage().nbytes(), v.numel() * v.element_size()) for v in state.values()]


def test_client_model_file_size_is_independent_of_the_number_of_clients(tmp_path):
    sizes = {}
    for n_clients in (4, 40):
        out = tmp_path / f"c{n_clients}"
        write_results(out, [], [], client_models(_stacked(n_clients)))
        files = layout.client_model_files(out)
        assert len(files) == n_clients
        sizes[n_clients] = {f.stat().st_size for f in files}
        last = _load(files[-1])
        assert all(stored == own for stored, own in _storage_bytes(last))
        assert torch.equal(last["personal/head.bias"], 2 * last["head.bias"])
    assert sizes[4] == sizes[40]
    (size,) = sizes[40]
    # the model and the kept group, once each, plus the zip archive's own records
    assert 2 * OWN_BYTES < size < 2 * OWN_BYTES + 8_000


def test_client_model_file_keeps_its_clients_values(tmp_path):
    stacked = _stacked(5)
    write_results(tmp_path, [], [], client_models(stacked, first_client=10))
    loaded = _load(layout.model_file(tmp_path, layout.client_file(13)))
    assert torch.equal(loaded["base.1.weight"], stacked["model"]["base.1.weight"][3])
    assert torch.equal(loaded["personal/base.1.bias"], stacked["personal"]["base.1.bias"][3])


def test_checkpoint_of_a_client_slice_holds_that_client_only(tmp_path):
    sizes = {}
    for n_clients in (4, 40):
        store = LocalStore(tmp_path / f"c{n_clients}")
        model = _stacked(n_clients)["model"]
        store.put_bytes("one.pt", checkpoint.dump({"client": {k: v[1] for k, v in model.items()},
                                                   "rows": [model["head.bias"][2]]}))
        sizes[n_clients] = len(store.get_bytes("one.pt"))
        loaded = checkpoint.load(store, "one.pt", torch.device("cpu"))
        assert all(stored == own for stored, own in _storage_bytes(loaded["client"]))
        assert torch.equal(loaded["rows"][0], model["head.bias"][2])
    assert sizes[4] == sizes[40]


def test_checkpoint_keeps_a_whole_stacked_tensor_as_it_is():
    stacked = torch.arange(12.0).reshape(3, 4)
    saved = _load(io.BytesIO(checkpoint.dump({"a": stacked, "b": stacked})))
    assert saved["a"].data_ptr() == saved["b"].data_ptr()  # one storage, written once
    assert torch.equal(saved["a"], stacked)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(0, 6), st.data())
def test_own_storage_keeps_the_values_and_only_the_tensors_bytes(shape, clients, data):
    stacked = torch.arange(float((clients + 1) * math.prod(shape))).reshape(clients + 1, *shape)
    client = data.draw(st.integers(0, clients))
    view = stacked[client].transpose(0, -1) if len(shape) > 1 else stacked[client]
    owned = own_storage(view)
    assert torch.equal(owned, view)
    assert owned.untyped_storage().nbytes() == owned.numel() * owned.element_size()
