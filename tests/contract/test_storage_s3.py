"""contract.storage's s3:// branch against moto's server, through the real boto3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from tests import aws

BUCKET = "data"


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


def _put(s3: Any, **objects: str) -> None:
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode())


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


def test_put_file_stores_an_object_that_exists_as_a_file(s3: Any, tmp_path: Path) -> None:
    source = tmp_path / "model.tar.gz"
    source.write_bytes(b"model")
    uri = f"s3://{BUCKET}/out/job/model.tar.gz"
    storage.put_file(source, uri)
    assert s3.get_object(Bucket=BUCKET, Key="out/job/model.tar.gz")["Body"].read() == b"model"
    assert storage.exists(uri)
    assert storage.is_file(uri)
    assert not storage.is_dir(uri)
    # The prefix holding it is a directory, and exists; a sibling key does not.
    assert storage.exists(f"s3://{BUCKET}/out/job")
    assert storage.is_dir(f"s3://{BUCKET}/out/job")
    assert not storage.is_file(f"s3://{BUCKET}/out/job")
    assert not storage.exists(f"s3://{BUCKET}/out/jo")
    assert not storage.exists(f"s3://{BUCKET}/out/job/other")


def test_list_objects_is_sorted_and_keeps_to_the_prefix(s3: Any) -> None:
    _put(s3, **{"train/b.csv": "bb", "train/a.csv": "a", "train/sub/c.csv": "ccc"})
    _put(s3, **{"train-old/x.csv": "x", "train/": ""})  # a sibling, and a folder marker
    assert storage.list_objects(f"s3://{BUCKET}/train") == [
        (f"s3://{BUCKET}/train/a.csv", 1),
        (f"s3://{BUCKET}/train/b.csv", 2),
        (f"s3://{BUCKET}/train/sub/c.csv", 3),
    ]
    assert storage.list_objects(f"s3://{BUCKET}/train/a.csv") == [(f"s3://{BUCKET}/train/a.csv", 1)]
    assert storage.list_objects(f"s3://{BUCKET}/nothing") == []


def test_fetch_a_prefix_lands_keys_relative_to_it(s3: Any, tmp_path: Path) -> None:
    _put(s3, **{"train/a.csv": "a", "train/sub/c.csv": "c", "train-old/x.csv": "x"})
    target = tmp_path / "channel"
    assert storage.fetch(f"s3://{BUCKET}/train/", target) == target
    assert _files(target) == {"a.csv": "a", "sub/c.csv": "c"}


def test_fetch_a_single_object_lands_under_its_name(s3: Any, tmp_path: Path) -> None:
    _put(s3, **{"src/code.tar.gz": "tar"})
    fetched = storage.fetch(f"s3://{BUCKET}/src/code.tar.gz", tmp_path / "scratch")
    assert fetched == tmp_path / "scratch" / "code.tar.gz"
    assert fetched.read_text() == "tar"


def test_fetch_a_shard_takes_every_nth_object_by_key(s3: Any, tmp_path: Path) -> None:
    _put(s3, **{f"train/part-{i}": str(i) for i in range(5)})
    shards = [storage.fetch(f"s3://{BUCKET}/train", tmp_path / str(i), (i, 2)) for i in (0, 1)]
    assert _files(shards[0]) == {"part-0": "0", "part-2": "2", "part-4": "4"}
    assert _files(shards[1]) == {"part-1": "1", "part-3": "3"}


@pytest.mark.parametrize(
    "key", ["train/../escape", "train/a/../../escape", "train//abs", "train/./x"]
)
def test_fetch_refuses_keys_that_leave_the_destination(s3: Any, tmp_path: Path, key: str) -> None:
    _put(s3, **{"train/fine.csv": "ok", key: "evil"})
    target = tmp_path / "deep" / "channel"
    with pytest.raises(storage.StorageError, match=f"s3://{BUCKET}/train: refused object"):
        storage.fetch(f"s3://{BUCKET}/train", target)
    # Refused whole: nothing was written, here or above.
    assert _files(tmp_path) == {}


def test_missing_bucket_errors_name_the_uri(s3: Any, tmp_path: Path) -> None:
    uri = "s3://no-such-bucket/train"
    for call in (
        lambda: storage.exists(uri),
        lambda: storage.is_dir(uri),
        lambda: storage.list_objects(uri),
        lambda: storage.fetch(uri, tmp_path / "x"),
    ):
        with pytest.raises(storage.StorageError, match=f"^{uri}: no such bucket 'no-such-bucket'"):
            call()
    source = tmp_path / "f"
    source.write_text("x")
    with pytest.raises(storage.StorageError, match=f"^{uri}/f: no such bucket"):
        storage.put_file(source, f"{uri}/f")


def test_fetch_of_a_missing_key_names_the_uri(s3: Any, tmp_path: Path) -> None:
    uri = f"s3://{BUCKET}/missing/thing.csv"
    assert not storage.exists(uri)
    with pytest.raises(storage.StorageError, match=f"^{uri}: no such file, object or prefix"):
        storage.fetch(uri, tmp_path / "x")


def test_malformed_and_unsupported_uris_are_refused() -> None:
    with pytest.raises(storage.StorageError, match="must name a bucket"):
        storage.exists("s3:///key")
    with pytest.raises(storage.StorageError, match="unsupported scheme"):
        storage.exists("gs://bucket/key")
    with pytest.raises(storage.StorageError, match="not a file:// URI"):
        storage.local_path("s3://bucket/key")


def test_endpoint_from_the_s3_specific_variable(
    s3: Any, moto: aws.MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # boto3 reads AWS_ENDPOINT_URL_S3 itself; nothing of Runyard's own is needed.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.url)
    _put(s3, **{"k": "v"})
    assert storage.is_file(f"s3://{BUCKET}/k")


def test_access_denied_names_the_uri(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A server that checks credentials: the dummy ones are refused.
    with aws.moto_server(
        tmp_path_factory.mktemp("moto-auth"), INITIAL_NO_AUTH_ACTION_COUNT="0"
    ) as server:
        for name, value in server.client_env().items():
            monkeypatch.setenv(name, value)
        uri = f"s3://{BUCKET}/train"
        with pytest.raises(storage.StorageError, match=f"^{uri}: access denied"):
            storage.is_dir(uri)
        with pytest.raises(storage.StorageError, match=f"^{uri}: access denied"):
            storage.fetch(uri, tmp_path / "x")


def test_a_key_that_answers_403_is_missing_if_listing_at_it_shows_nothing(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 answers HEAD on a missing key with 403 to credentials whose listing is held to
    prefixes (a job's); moto, which answers 404, shows the same by a policy that allows
    listing and reading nothing."""
    with aws.moto_server(tmp_path_factory.mktemp("moto-iam")) as server:
        server.client("s3").create_bucket(Bucket=BUCKET)
        server.client("s3").put_object(Bucket=BUCKET, Key="data/present", Body=b"x")
        listing = [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]
        keys = aws.iam_user(server, "lister", listing)
        aws.enforce_iam(server)
        aws.as_user(monkeypatch, server, keys)
        assert storage.is_file(f"s3://{BUCKET}/data/absent") is False
        assert storage.exists(f"s3://{BUCKET}/data") is True
        # There, but not to be read: that is said, not taken for missing.
        with pytest.raises(storage.StorageError, match="data/present: access denied"):
            storage.is_file(f"s3://{BUCKET}/data/present")


def test_file_uris_never_import_boto3(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    code = (
        "import sys; from pathlib import Path; "
        "from contract import storage; from runtime import train; "
        f"uri = {(tmp_path / 'd').as_uri()!r}; "
        "storage.exists(uri); storage.list_objects(uri); "
        f"storage.fetch(uri, Path({str(tmp_path / 'out')!r}), (0, 1)); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
    assert (tmp_path / "out" / "f").read_text() == "x"
