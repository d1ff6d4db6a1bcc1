"""LocalStore, the directory helpers, open_store and S3 URI parsing (no server needed)."""

import pytest

from pflpipe.spec.sections import LocalStorage, S3Storage
from pflpipe.storage import LocalStore, download_dir, open_store, open_uri, upload_dir


def test_local_store_round_trips_bytes_and_leaves_no_temporary_files(tmp_path):
    store = LocalStore(tmp_path / "store")

    store.put_bytes("checkpoints/round_0000.pt", b"first")
    store.put_bytes("checkpoints/round_0000.pt", b"second")

    assert store.get_bytes("checkpoints/round_0000.pt") == b"second"
    assert [p.name for p in (tmp_path / "store" / "checkpoints").iterdir()] == ["round_0000.pt"]


def test_local_store_missing_key_raises_file_not_found_naming_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="'round_0009.pt' not found in file://"):
        LocalStore(tmp_path).get_bytes("round_0009.pt")


def test_local_store_list_matches_folders_and_exact_keys(tmp_path):
    store = LocalStore(tmp_path)
    for key in ("round_1.pt", "round_10.pt", "clients/a.pt", "clients/b/c.pt"):
        store.put_bytes(key, b"x")

    assert store.list() == ["clients/a.pt", "clients/b/c.pt", "round_1.pt", "round_10.pt"]
    assert store.list("clients") == ["clients/a.pt", "clients/b/c.pt"]
    assert store.list("round_1.pt") == ["round_1.pt"]
    assert store.list("nothing") == []


def test_local_store_child_exists_and_delete(tmp_path):
    store = LocalStore(tmp_path).child("results/ditto")
    store.put_bytes("results.csv", b"client,model,accuracy\n")

    assert store.exists("results.csv") and not store.exists("summary.md")
    assert store.uri == (tmp_path / "results" / "ditto").as_uri()
    store.delete("results.csv")
    store.delete("results.csv")
    assert store.list() == []


def test_local_store_refuses_keys_outside_its_root(tmp_path):
    with pytest.raises(ValueError, match="leaves the store root"):
        LocalStore(tmp_path / "a").put_bytes("../b/x", b"")


def test_upload_and_download_dir_round_trip(tmp_path):
    source = tmp_path / "source"
    (source / "models").mkdir(parents=True)
    (source / "models" / "client_0000.pt").write_bytes(b"\x00\x01")
    (source / "results.csv").write_text("client,accuracy\n")
    store = LocalStore(tmp_path / "store")

    keys = upload_dir(store, source, "run-1")
    paths = download_dir(store, "run-1", tmp_path / "back")

    assert keys == ["run-1/models/client_0000.pt", "run-1/results.csv"]
    assert [p.read_bytes() for p in paths] == [b"\x00\x01", b"client,accuracy\n"]


def test_open_store_local_uses_path_or_default_root(tmp_path):
    default = open_store(LocalStorage(kind="local"), default_root=tmp_path / "results")
    explicit = open_store(LocalStorage(kind="local", path=str(tmp_path / "elsewhere")), "unused")

    assert isinstance(default, LocalStore) and default.root == tmp_path / "results"
    assert explicit.root == tmp_path / "elsewhere"


def test_open_store_s3_builds_an_s3_store_from_the_spec():
    from pflpipe.storage.s3 import S3Store

    spec = S3Storage(kind="s3", bucket="experiments", prefix="/pfl/run-1/",
                     endpoint_url="http://minio:9000", max_attempts=3)

    store = open_store(spec, default_root="unused")

    assert isinstance(store, S3Store)
    assert store.uri == "s3://experiments/pfl/run-1"
    assert store.child("checkpoints").uri == "s3://experiments/pfl/run-1/checkpoints"


def test_open_uri_of_a_local_store_is_its_root_as_path_or_file_uri(tmp_path):
    store = LocalStore(tmp_path / "a folder")
    store.put_bytes("task.pkl", b"x")

    assert store.uri.endswith("/a%20folder")
    for uri in (store.uri, str(tmp_path / "a folder")):
        assert open_uri(uri).root == store.root
        assert open_uri(uri).get_bytes("task.pkl") == b"x"


def test_open_uri_of_s3_takes_the_endpoint_from_the_environment(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    assert open_uri("s3://runs/ckpt/workers/ab").endpoint_url == "http://minio:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.internal:9000")
    store = open_uri("s3://runs/ckpt/workers/ab/")

    assert (store.uri, store.endpoint_url) == ("s3://runs/ckpt/workers/ab",
                                               "http://s3.internal:9000")


@pytest.mark.parametrize("uri", ["gs://bucket/x", "file://otherhost/tmp/x"])
def test_open_uri_refuses_what_is_not_a_store_here(uri):
    with pytest.raises(ValueError, match="not a"):
        open_uri(uri)


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://data", ("data", "")), ("s3://data/mnist/raw/", ("data", "mnist/raw")),
    ("s3://data/digits.npz", ("data", "digits.npz")),
])
def test_parse_s3_uri(uri, expected):
    from pflpipe.storage.s3 import parse_s3_uri

    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize("uri", ["s3://", "gs://bucket/x", "bucket/x"])
def test_parse_s3_uri_rejects_non_s3_uris(uri):
    from pflpipe.storage.s3 import parse_s3_uri

    with pytest.raises(ValueError, match="not an s3:// URI"):
        parse_s3_uri(uri)


def test_s3_store_refuses_zero_attempts():
    from pflpipe.storage.s3 import S3Store

    with pytest.raises(ValueError, match="max_attempts must be 1 or more"):
        S3Store("bucket", max_attempts=0)

