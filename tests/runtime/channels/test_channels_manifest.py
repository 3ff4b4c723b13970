"""ManifestFile channels: the manifest names the objects, checked whole before any lands;
sharded by key across hosts, from file:// and from S3 (moto's server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime import channels
from runtime.channels import manifest
from tests.channels import DOWNLOAD_FAILED, files, instance_configs

BUCKET = "data"


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


def _dataset(tmp_path: Path, names: list[str]) -> Path:
    root = tmp_path / "dataset"
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"content of {name}")
    return root


def _manifest(tmp_path: Path, content: object) -> str:
    path = tmp_path / "manifests" / "train.manifest"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path.as_uri()


def _channel(uri: str, **options: str) -> dict[str, str]:
    return {"uri": uri, "s3_data_type": "ManifestFile", **options}


def test_a_manifest_fetches_exactly_its_entries_at_their_keys(tmp_path: Path) -> None:
    root = _dataset(tmp_path, ["a.csv", "sub/b.csv", "not-listed.csv"])
    uri = _manifest(tmp_path, [{"prefix": f"{root.as_uri()}/"}, "sub/b.csv", "a.csv"])
    (config,) = instance_configs(tmp_path, {"train": _channel(uri)})
    said: list[str] = []
    channels.open_all(config, said.append).close()
    assert files(config.paths.data / "train") == {
        "a.csv": b"content of a.csv",
        "sub/b.csv": b"content of sub/b.csv",
    }
    assert said[-1].startswith("Channel train: 2 objects, 36 B in ")


def test_a_sharded_manifest_on_s3_reaches_every_host_once_in_key_order(
    tmp_path: Path, s3: Any
) -> None:
    keys = [f"part-{i:02d}.csv" for i in range(8)]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=f"set/{key}", Body=key.encode())
    s3.put_object(Bucket=BUCKET, Key="set/extra.csv", Body=b"not in the manifest")
    # Listed out of order: the split follows the sorted keys, not the manifest's order.
    listed = [keys[i] for i in (5, 0, 7, 2, 1, 6, 3, 4)]
    body = json.dumps([{"prefix": f"s3://{BUCKET}/set/"}, *listed]).encode()
    s3.put_object(Bucket=BUCKET, Key="manifests/train.manifest", Body=body)
    uri = f"s3://{BUCKET}/manifests/train.manifest"
    configs = instance_configs(
        tmp_path, {"train": _channel(uri, distribution="ShardedByS3Key")}, instance_count=3
    )
    shares = []
    for config in configs:
        channels.open_all(config, lambda _line: None).close()
        shares.append(files(config.paths.data / "train"))
    for index, share in enumerate(shares):
        assert sorted(share) == keys[index::3]
        assert all(content == key.encode() for key, content in share.items())
    assert sorted(key for share in shares for key in share) == keys


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("not json at all", "not JSON"),
        ({"prefix": "file:///data/"}, "must be a JSON array"),
        ([], "must be a JSON array"),
        (["a.csv"], 'first element must be {"prefix": "<uri>"}'),
        ([{"prefix": ""}, "a.csv"], 'first element must be {"prefix": "<uri>"}'),
        ([{"prefix": "gs://bucket/"}, "a.csv"], "prefix 'gs://bucket/': "),
        ([{"prefix": "PREFIX"}, "a.csv", "../../etc/passwd"], "entry 2 '../../etc/passwd': not a"),
        ([{"prefix": "PREFIX"}, "/etc/passwd"], "entry 1 '/etc/passwd': not a relative path"),
        ([{"prefix": "PREFIX"}, ""], "entry 1 '': not a relative path"),
        ([{"prefix": "PREFIX"}, "a//b"], "entry 1 'a//b': not a relative path"),
        ([{"prefix": "PREFIX"}, "sub/./a.csv"], "entry 1 'sub/./a.csv': not a relative path"),
        ([{"prefix": "PREFIX"}, "sub/"], "entry 1 'sub/': not a relative path"),
        ([{"prefix": "PREFIX"}, 7], "entry 1 must be a relative key (a string), not 7"),
        ([{"prefix": "PREFIX"}, "a.csv", "a.csv"], "entry 2 'a.csv': named twice"),
    ],
)
def test_a_hostile_or_broken_manifest_is_refused_before_anything_lands(
    tmp_path: Path, content: object, complaint: str
) -> None:
    root = _dataset(tmp_path, ["a.csv"])
    if isinstance(content, list):
        content = [
            {"prefix": f"{root.as_uri()}/"} if item == {"prefix": "PREFIX"} else item
            for item in content
        ]
    uri = _manifest(tmp_path, content)
    (config,) = instance_configs(tmp_path, {"train": _channel(uri)})
    with pytest.raises(channels.ChannelError) as caught:
        channels.open_all(config, lambda _line: None)
    assert isinstance(caught.value.__cause__, manifest.ManifestError)
    assert str(caught.value).startswith(f"{DOWNLOAD_FAILED}manifest {uri}: ")
    assert complaint in str(caught.value)
    assert files(config.paths.data) == {}


def test_a_manifest_entry_with_no_object_fails_naming_it(tmp_path: Path) -> None:
    root = _dataset(tmp_path, ["a.csv"])
    uri = _manifest(tmp_path, [{"prefix": f"{root.as_uri()}/"}, "a.csv", "gone.csv"])
    (config,) = instance_configs(tmp_path, {"train": _channel(uri)})
    with pytest.raises(
        channels.ChannelError, match=f"^{DOWNLOAD_FAILED}{root.as_uri()}/gone.csv: no such file$"
    ):
        channels.open_all(config, lambda _line: None)
    assert files(config.paths.data) == {}


def test_a_missing_manifest_on_s3_names_it(tmp_path: Path, s3: Any) -> None:
    uri = f"s3://{BUCKET}/manifests/none.manifest"
    (config,) = instance_configs(tmp_path, {"train": _channel(uri)})
    with pytest.raises(channels.ChannelError, match=f"^{DOWNLOAD_FAILED}{uri}: no such object$"):
        channels.open_all(config, lambda _line: None)


def test_file_keys_are_file_names_never_uri_syntax(tmp_path: Path) -> None:
    # "%2e%2e" is a directory's real name here; decoded, it would read outside the prefix.
    root = _dataset(tmp_path, ["a#1.csv", "b?.csv", "%2e%2e/x.csv"])
    (tmp_path / "x.csv").write_text("outside the prefix")
    keys = ["a#1.csv", "b?.csv", "%2e%2e/x.csv"]
    uri = _manifest(tmp_path, [{"prefix": f"{root.as_uri()}/"}, *keys])
    (config,) = instance_configs(tmp_path, {"train": _channel(uri)})
    channels.open_all(config, lambda _line: None).close()
    assert files(config.paths.data / "train") == {key: f"content of {key}".encode() for key in keys}
