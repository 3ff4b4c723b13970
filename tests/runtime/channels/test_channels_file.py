"""File mode: gzipped objects land gunzipped, objects that cannot all land are refused,
and a download says how far it is."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from runtime import channels
from runtime.channels import channel_data, pipe
from runtime.channels.channel_data import ChannelObject
from tests.channels import DOWNLOAD_FAILED, files, gzipped, instance_configs

BUCKET = "data"


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


def _write(root: Path, content: dict[str, bytes]) -> Path:
    for name, data in content.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_gzip_objects_land_gunzipped_without_their_gz(tmp_path: Path) -> None:
    big = os.urandom(300_000) * 4  # larger than one chunk, in and out
    data = _write(
        tmp_path / "data",
        {
            "a.csv.gz": gzipped(b"1,2\n"),
            "sub/b.bin.gz": gzipped(big),
            "no-suffix": gzipped(b"still compressed"),
            # Two members, as `cat x.gz y.gz` makes, then zero padding: one content.
            "joined.gz": gzipped(b"first ") + gzipped(b"second") + b"\0" * 512,
        },
    )
    (config,) = instance_configs(tmp_path, {"train": {"uri": data.as_uri(), "compression": "Gzip"}})
    channels.open_all(config, lambda _line: None).close()
    assert files(config.paths.data / "train") == {
        "a.csv": b"1,2\n",
        "sub/b.bin": big,
        "no-suffix": b"still compressed",
        "joined": b"first second",
    }


def test_gzip_objects_from_s3_are_sharded_and_gunzipped(tmp_path: Path, s3: Any) -> None:
    for i in range(5):
        s3.put_object(Bucket=BUCKET, Key=f"train/part-{i}.gz", Body=gzipped(f"row {i}\n".encode()))
    inputs = {
        "train": {
            "uri": f"s3://{BUCKET}/train",
            "compression": "Gzip",
            "distribution": "ShardedByS3Key",
        }
    }
    first, second = instance_configs(tmp_path, inputs, instance_count=2)
    for config in (first, second):
        channels.open_all(config, lambda _line: None).close()
    assert files(first.paths.data / "train") == {
        f"part-{i}": f"row {i}\n".encode() for i in (0, 2, 4)
    }
    assert files(second.paths.data / "train") == {
        f"part-{i}": f"row {i}\n".encode() for i in (1, 3)
    }


@pytest.mark.parametrize(
    "body",
    [
        b"this was never gzip",
        gzipped(b"x" * 100_000)[:-40],  # cut off before its end
        gzipped(b"fine") + b"garbage after the member",
    ],
    ids=["not-gzip", "truncated", "trailing-garbage"],
)
def test_a_corrupt_gzip_object_fails_naming_it_and_leaves_nothing(
    tmp_path: Path, body: bytes
) -> None:
    data = _write(tmp_path / "data", {"bad.gz": body})
    (config,) = instance_configs(tmp_path, {"train": {"uri": data.as_uri(), "compression": "Gzip"}})
    with pytest.raises(channels.ChannelError) as caught:
        channels.open_all(config, lambda _line: None)
    # In SageMaker's words for a failed download, naming the channel and the object.
    assert str(caught.value).startswith(
        f"{DOWNLOAD_FAILED}{(data / 'bad.gz').as_uri()}: not a valid gzip object"
    )
    assert files(config.paths.data) == {}  # not even a temporary file


def test_gunzip_output_is_bounded_per_chunk() -> None:
    # A small object that expands enormously comes out a chunk at a time.
    item = channel_data.ChannelObject("file:///unused", "x", 0, gzip=True)
    body = gzip.compress(b"\0" * (5 * storage.CHUNK_SIZE), compresslevel=9)
    pieces = list(channel_data._gunzip(item.uri, [body], None))
    assert max(len(piece) for piece in pieces) <= storage.CHUNK_SIZE
    assert sum(len(piece) for piece in pieces) == 5 * storage.CHUNK_SIZE
    with pytest.raises(storage.StorageError, match="incorrect header check"):
        list(channel_data._gunzip(item.uri, [zlib.compress(b"zlib, not gzip")], None))


@pytest.mark.parametrize(
    ("content", "clash"),
    [
        ({"a.gz": gzipped(b"1"), "a": gzipped(b"2")}, "would both land at 'a'"),
        ({"a.gz": gzipped(b"1"), "a/b.gz": gzipped(b"2")}, "a.gz lands at 'a', where file:///"),
    ],
)
def test_objects_that_cannot_all_land_are_refused(
    tmp_path: Path, content: dict[str, bytes], clash: str
) -> None:
    data = _write(tmp_path / "data", content)
    (config,) = instance_configs(tmp_path, {"train": {"uri": data.as_uri(), "compression": "Gzip"}})
    with pytest.raises(channels.ChannelError, match=f"^{DOWNLOAD_FAILED}.*{clash}"):
        channels.open_all(config, lambda _line: None)
    assert files(config.paths.data) == {}


def test_a_missing_prefix_fails_naming_it(tmp_path: Path) -> None:
    missing = (tmp_path / "nothing-here").as_uri()
    (config,) = instance_configs(tmp_path, {"train": missing})
    with pytest.raises(
        channels.ChannelError, match=f"^{DOWNLOAD_FAILED}{missing}: no such file or directory$"
    ):
        channels.open_all(config, lambda _line: None)


def test_download_says_how_far_it_is_and_how_long_it_took(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", {f"part-{i}": b"x" * 1_500_000 for i in range(4)})
    objects = [
        channel_data.ChannelObject(item.uri, item.relative, item.size)
        for item in storage.listing(data.as_uri())
    ]
    said: list[str] = []
    channels.download("train", objects, tmp_path / "out", said.append, progress_interval=0)
    progress = [line for line in said if "/4 objects" in line]
    # Byte counts come chunk by chunk; each finished object is counted once.
    assert progress[-1] == "Channel train: 4/4 objects, 6.0 MB of 6.0 MB (100%)"
    assert any("objects, 1.0 MB of 6.0 MB (17%)" in line for line in progress)
    assert said[-1].startswith("Channel train: 4 objects, 6.0 MB in ")
    assert said[-1].endswith(" s")
    assert files(tmp_path / "out") == files(data)


def test_progress_lines_are_spaced_by_the_interval() -> None:
    now = [0.0]
    said: list[str] = []
    progress = channels.Progress(
        "train", 4, 4_000_000_000, said.append, interval=5.0, clock=lambda: now[0]
    )
    for second, count in ((1, 10**9), (4.9, 10**9)):
        now[0] = second
        progress.add_bytes(count)
        progress.add_object()
    assert said == []
    now[0] = 5.0
    progress.add_bytes(10**9)
    now[0] = 9.0
    progress.add_object()  # within 5 s of the last line: quiet
    now[0] = 12.5
    progress.add_object()
    progress.add_bytes(10**9)  # within 5 s of the last line: quiet
    now[0] = 20.0
    progress.finish()
    assert said == [
        "Channel train: 2/4 objects, 3.0 GB of 4.0 GB (75%)",
        "Channel train: 4/4 objects, 3.0 GB of 4.0 GB (75%)",
        "Channel train: 4 objects, 4.0 GB in 20.0 s",
    ]


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0 B"), (999, "999 B"), (1_000, "1.0 KB"), (1_234_567, "1.2 MB"), (4.8e9, "4.8 GB")],
)
def test_sizes_read_as_people_write_them(count: float, shown: str) -> None:
    assert channels.human_bytes(int(count)) == shown


def test_links_to_files_arrive_as_the_files(tmp_path: Path) -> None:
    store = _write(tmp_path / "store", {"shard-0.bin": b"zero"})
    data = _write(tmp_path / "data", {"labels.csv": b"a,b\n"})
    (data / "shard-0.bin").symlink_to(store / "shard-0.bin")
    (data / "dangling").symlink_to(tmp_path / "nowhere")
    [config] = instance_configs(tmp_path, {"train": data.as_uri()})
    channels.open_all(config, lambda _line: None).close()
    assert files(config.paths.data / "train") == {"labels.csv": b"a,b\n", "shard-0.bin": b"zero"}


def test_a_local_failure_to_land_names_the_object_and_where(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", {"x.csv": b"x"})
    item = ChannelObject((data / "x.csv").as_uri(), "x.csv", 1)
    inputs = tmp_path / "input" / "data"
    # A Pipe channel "train" makes its FIFO train_0 where a channel "train_0" would land.
    fifos = pipe.PipeChannel("train", [item], inputs, lambda _line: None).start()
    try:
        taken = inputs / "train_0"
        with pytest.raises(storage.StorageError) as caught:
            channel_data.land(item, taken / "x.csv")
        assert str(caught.value) == (
            f"{item.uri} -> {taken / 'x.csv'}: cannot land it (File exists)"
        )
        with pytest.raises(channels.ChannelError, match=r"^channel train_0: cannot make its "):
            channels.download("train_0", [item], taken, lambda _line: None)
    finally:
        fifos.stop()


def test_an_object_that_would_replace_a_directory_fails_naming_both(tmp_path: Path) -> None:
    data = _write(tmp_path / "data", {"x.csv": b"x"})
    item = ChannelObject((data / "x.csv").as_uri(), "x.csv", 1)
    target = tmp_path / "landing" / "x.csv"
    (target / "already").mkdir(parents=True)
    with pytest.raises(storage.StorageError, match=f"^{item.uri} -> {target}: cannot land it"):
        channel_data.land(item, target)
    assert os.listdir(target.parent) == ["x.csv"]  # and no temporary left beside it
