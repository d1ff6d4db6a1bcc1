"""S3Store and download_uri against moto's standalone S3 server on 127.0.0.1 (a subprocess)."""

import io
import threading

import boto3
import pytest
import torch

from pflpipe.errors import StorageError
from pflpipe.spec.sections import S3Storage
from pflpipe.storage import download_dir, open_store, upload_dir
from pflpipe.storage.s3 import S3Store, download_uri

pytestmark = pytest.mark.server


def state_dict(round_idx: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(round_idx)
    return {"fc.weight": torch.randn(4, 3, generator=generator), "fc.bias": torch.zeros(4)}


def to_bytes(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


def fast_store(endpoint: str, bucket: str, prefix: str = "exp", **settings) -> S3Store:
    settings = {"max_attempts": 2, "connect_timeout": 1, "read_timeout": 1,
                **settings}
    return S3Store(bucket, prefix, endpoint_url=endpoint, **settings)


def test_s3_store_checkpoints_round_trip(s3_server, bucket):
    spec = S3Storage(kind="s3", bucket=bucket, prefix="runs/persfl", endpoint_url=s3_server)
    store = open_store(spec, default_root="unused").child("checkpoints")

    for round_idx in range(4):
        store.put_bytes(f"round_{round_idx:04d}.pt", to_bytes(state_dict(round_idx)))
    store.put_bytes("progress.json", b'{"rounds_completed": 3}')

    assert store.uri == f"s3://{bucket}/runs/persfl/checkpoints"
    assert store.list() == ["progress.json", *(f"round_{r:04d}.pt" for r in range(4))]
    for round_idx in range(4):
        loaded = from_bytes(store.get_bytes(f"round_{round_idx:04d}.pt"))
        assert torch.equal(loaded["fc.weight"], state_dict(round_idx)["fc.weight"])
    assert store.exists("round_0003.pt") and not store.exists("round_0004.pt")
    # every object really sits under the spec's prefix in the bucket
    listed = boto3.client("s3", endpoint_url=s3_server).list_objects_v2(Bucket=bucket)
    assert {o["Key"] for o in listed["Contents"]} == {
        f"runs/persfl/checkpoints/{name}" for name in store.list()}


def test_s3_store_list_matches_folders_not_string_prefixes(s3_server, bucket):
    store = fast_store(s3_server, bucket)
    for key in ("round_1.pt", "round_10.pt", "clients/a.pt", "clients/b/c.pt", "clientsx.pt"):
        store.put_bytes(key, b"x")

    assert store.list("clients") == ["clients/a.pt", "clients/b/c.pt"]
    assert store.list("round_1.pt") == ["round_1.pt"]
    assert store.list("round_1") == []
    assert store.child("clients").list() == ["a.pt", "b/c.pt"]


def test_s3_store_delete_removes_key_and_ignores_missing(s3_server, bucket):
    store = fast_store(s3_server, bucket)
    store.put_bytes("a.pt", b"1")

    store.delete("a.pt")
    store.delete("never-written.pt")

    assert store.list() == []


def test_s3_store_missing_key_raises_file_not_found_naming_it(s3_server, bucket):
    store = fast_store(s3_server, bucket)

    with pytest.raises(FileNotFoundError, match=f"s3://{bucket}/exp/round_0007.pt"):
        store.get_bytes("round_0007.pt")


def test_s3_store_key_leaving_root_is_refused(s3_server, bucket):
    with pytest.raises(ValueError, match="leaves the store root"):
        fast_store(s3_server, bucket).put_bytes("../other/x", b"")


def test_s3_store_upload_and_download_dir_round_trip(s3_server, bucket, tmp_path):
    source = tmp_path / "results"
    (source / "models").mkdir(parents=True)
    (source / "results.csv").write_text("client,model,accuracy\n0,ditto,0.9\n")
    (source / "models" / "client_0000.pt").write_bytes(to_bytes(state_dict(0)))
    store = fast_store(s3_server, bucket)

    keys = upload_dir(store, source, "results/ditto")
    paths = download_dir(store, "results/ditto", tmp_path / "back")

    assert keys == ["results/ditto/models/client_0000.pt", "results/ditto/results.csv"]
    assert sorted(p.relative_to(tmp_path / "back").as_posix() for p in paths) == [
        "models/client_0000.pt", "results.csv"]
    assert (tmp_path / "back" / "results.csv").read_text() == (source / "results.csv").read_text()


def test_s3_store_missing_bucket_says_to_create_it(s3_server):
    store = fast_store(s3_server, "no-such-bucket-here")

    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist at "
                       f"{s3_server}: create it"):
        store.put_bytes("round_0000.pt", b"x")


def test_s3_store_without_credentials_says_how_to_provide_them(s3_server, bucket, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")

    with pytest.raises(StorageError, match="no S3 credentials: set AWS_ACCESS_KEY_ID and "
                       r"AWS_SECRET_ACCESS_KEY \(or a Kubernetes secret via storage.secret_name\)"):
        fast_store(s3_server, bucket).get_bytes("round_0000.pt")


def test_s3_store_rejected_credentials_name_endpoint_and_bucket(moto_factory, monkeypatch):
    # moto checks every request's key against its (empty) IAM from the first action on
    server = moto_factory({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")

    with pytest.raises(StorageError, match=f"S3 refused the credentials for bucket 'ckpt' at "
                       f"{server.url} .* during put of s3://ckpt/exp/round_0000.pt: check "
                       "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY") as caught:
        fast_store(server.url, "ckpt").put_bytes("round_0000.pt", b"x")
    assert "AKIAUNKNOWNKEY000000" not in str(caught.value)


def test_s3_store_paused_server_raises_after_bounded_retries_and_loses_nothing(s3_process,
                                                                               make_bucket):
    bucket = make_bucket(s3_process.url)
    store = fast_store(s3_process.url, bucket, max_attempts=2)
    for round_idx in range(3):
        store.put_bytes(f"round_{round_idx:04d}.pt", to_bytes(state_dict(round_idx)))

    s3_process.pause()
    try:
        with pytest.raises(StorageError) as caught:
            store.put_bytes("round_0003.pt", to_bytes(state_dict(3)))
    finally:
        s3_process.resume()

    message = str(caught.value)
    assert f"s3://{bucket}/exp/round_0003.pt at {s3_process.url} failed after 2 attempts" in message
    store.put_bytes("round_0003.pt", to_bytes(state_dict(3)))  # the same call, server back
    assert store.list() == [f"round_{r:04d}.pt" for r in range(4)]
    assert torch.equal(from_bytes(store.get_bytes("round_0001.pt"))["fc.weight"],
                       state_dict(1)["fc.weight"])


def test_s3_store_survives_a_brief_outage_by_retrying(s3_process, make_bucket):
    bucket = make_bucket(s3_process.url)
    store = fast_store(s3_process.url, bucket, max_attempts=6)
    store.put_bytes("round_0000.pt", b"0")

    s3_process.pause()
    timer = threading.Timer(1.5, s3_process.resume)
    timer.start()
    try:
        store.put_bytes("round_0001.pt", b"1")
    finally:
        timer.join()

    assert store.get_bytes("round_0001.pt") == b"1"


def test_s3_store_dead_server_raises_then_same_call_succeeds_after_restart(s3_process,
                                                                           make_bucket):
    bucket = make_bucket(s3_process.url)
    store = fast_store(s3_process.url, bucket, max_attempts=3)
    store.put_bytes("round_0000.pt", b"0")

    s3_process.stop()
    with pytest.raises(StorageError, match=f"s3://{bucket}/exp/round_0001.pt at "
                       f"{s3_process.url} failed after 3 attempts"):
        store.put_bytes("round_0001.pt", b"1")

    s3_process.start()
    make_bucket(s3_process.url, bucket)  # moto keeps objects in memory only; S3 would keep it
    store.put_bytes("round_0001.pt", b"1")
    assert store.get_bytes("round_0001.pt") == b"1"


def upload(endpoint: str, bucket: str, objects: dict[str, bytes]) -> None:
    client = boto3.client("s3", endpoint_url=endpoint)
    for key, data in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)


def test_download_uri_fetches_every_object_under_prefix(s3_server, bucket, tmp_path):
    upload(s3_server, bucket, {"datasets/mnist/raw/train.bin": b"t" * 100,
                               "datasets/mnist/raw/sub/test.bin": b"s" * 10,
                               "datasets/mnist-other/x.bin": b"no"})

    paths = download_uri(f"s3://{bucket}/datasets/mnist/", tmp_path, endpoint_url=s3_server)

    assert paths == [tmp_path / "raw/sub/test.bin", tmp_path / "raw/train.bin"]
    assert (tmp_path / "raw/train.bin").read_bytes() == b"t" * 100
    assert not (tmp_path / "x.bin").exists()


def test_download_uri_skips_complete_files_and_refetches_partial_ones(s3_server, bucket, tmp_path):
    upload(s3_server, bucket, {"d/a.bin": b"a" * 50, "d/b.bin": b"b" * 50})
    download_uri(f"s3://{bucket}/d", tmp_path, endpoint_url=s3_server)
    (tmp_path / "b.bin").write_bytes(b"b" * 20)  # an interrupted earlier download
    stamp = (tmp_path / "a.bin").stat().st_mtime_ns

    download_uri(f"s3://{bucket}/d", tmp_path, endpoint_url=s3_server)

    assert (tmp_path / "a.bin").stat().st_mtime_ns == stamp
    assert (tmp_path / "b.bin").read_bytes() == b"b" * 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]  # no temp files


def test_download_uri_of_one_object_keeps_its_name(s3_server, bucket, tmp_path):
    upload(s3_server, bucket, {"data/digits.npz": b"npz"})

    paths = download_uri(f"s3://{bucket}/data/digits.npz", tmp_path, endpoint_url=s3_server)

    assert paths == [tmp_path / "digits.npz"]


def test_download_uri_of_empty_prefix_raises(s3_server, bucket, tmp_path):
    with pytest.raises(StorageError, match=f"no objects under s3://{bucket}/nothing"):
        download_uri(f"s3://{bucket}/nothing", tmp_path, endpoint_url=s3_server)
