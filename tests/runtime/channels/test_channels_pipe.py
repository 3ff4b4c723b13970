"""Pipe mode: real FIFOs, read by real readers (threads and processes), one per epoch;
nothing lands on disk, and stopping never waits for a reader."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from contract.instance_config import InstanceConfig
from runtime import channels
from runtime.channels import pipe
from runtime.channels.channel_data import ChannelObject
from tests.channels import gzipped, instance_configs, wait_for

BUCKET = "data"
# Each object is larger than a pipe's buffer (64 KiB), so the writer must wait on the
# reader, as it does with real data.
OBJECT_SIZE = 200_000


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


def _parts(root: Path, count: int) -> dict[str, bytes]:
    """``count`` objects under ``root``; their contents by key."""
    root.mkdir(parents=True, exist_ok=True)
    content = {f"part-{i}": bytes([65 + i]) * OBJECT_SIZE for i in range(count)}
    for key, data in content.items():
        (root / key).write_bytes(data)
    return content


def _open(config: InstanceConfig) -> channels.Inputs:
    return channels.open_all(config, lambda _line: None)


def _read_all(path: Path) -> bytes:
    with open(path, "rb") as fifo:
        return fifo.read()


def _only_fifos(directory: Path) -> bool:
    return all(stat.S_ISFIFO(path.lstat().st_mode) for path in directory.rglob("*"))


def _landed(config: InstanceConfig) -> list[Path]:
    """Regular files under the instance's base directory, but for its config files."""
    return [
        path
        for path in config.paths.base.rglob("*")
        if path.is_file() and not path.is_relative_to(config.paths.config)
    ]


def test_each_epoch_is_every_object_in_key_order_read_by_another_process(
    tmp_path: Path,
) -> None:
    content = _parts(tmp_path / "data", 3)
    (config,) = instance_configs(
        tmp_path, {"train": {"uri": (tmp_path / "data").as_uri(), "input_mode": "Pipe"}}
    )
    inputs = _open(config)
    try:
        expected = b"".join(content[key] for key in sorted(content))
        data = config.paths.data
        for epoch in range(3):
            # A reader of its own, as the script is: it opens, reads to EOF, closes.
            read = subprocess.run(
                ["cat", str(data / f"train_{epoch}")], capture_output=True, timeout=20, check=True
            )
            assert read.stdout == expected, epoch
        # No file landed, in the data directory or anywhere under the instance.
        assert _only_fifos(data)
        assert _landed(config) == []
        assert inputs.error() is None
    finally:
        inputs.close()
    assert list(config.paths.data.iterdir()) == []


def test_a_sharded_gzip_channel_streams_from_s3_gunzipped(tmp_path: Path, s3: Any) -> None:
    content = {f"part-{i}": bytes([65 + i]) * OBJECT_SIZE for i in range(5)}
    for key, data in content.items():
        s3.put_object(Bucket=BUCKET, Key=f"train/{key}.gz", Body=gzipped(data))
    inputs_spec = {
        "train": {
            "uri": f"s3://{BUCKET}/train",
            "input_mode": "Pipe",
            "compression": "Gzip",
            "distribution": "ShardedByS3Key",
        }
    }
    configs = instance_configs(tmp_path, inputs_spec, instance_count=2)
    opened = [_open(config) for config in configs]
    try:
        streams = [_read_all(config.paths.data / "train_0") for config in configs]
        assert streams[0] == content["part-0"] + content["part-2"] + content["part-4"]
        assert streams[1] == content["part-1"] + content["part-3"]
        for config in configs:
            assert _only_fifos(config.paths.data)
            assert _landed(config) == []
    finally:
        for inputs in opened:
            inputs.close()


def test_a_reader_that_closes_early_ends_only_that_epoch(tmp_path: Path) -> None:
    content = _parts(tmp_path / "data", 4)
    objects = [
        ChannelObject((tmp_path / "data" / key).as_uri(), key, OBJECT_SIZE)
        for key in sorted(content)
    ]
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", lambda _line: None).start()
    try:
        with open(channel.fifo(0), "rb") as fifo:
            assert fifo.read(10) == b"A" * 10  # and close with most of the epoch unread
        assert _read_all(channel.fifo(1)) == b"".join(content[key] for key in sorted(content))
        assert channel.error is None
        assert channel.serving
    finally:
        channel.stop()
    assert not channel.serving


def test_stopping_with_no_reader_ever_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x").write_bytes(b"x")
    objects = [ChannelObject((tmp_path / "data" / "x").as_uri(), "x", 1)]
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", lambda _line: None).start()
    # The writer now waits in open(2) for a reader that will never come.
    wait_for(lambda: channel.fifo(0).exists(), "the first FIFO")
    assert stat.S_ISFIFO(channel.fifo(0).stat().st_mode)
    started = time.monotonic()
    channel.stop(timeout=10)
    assert not channel.serving
    assert time.monotonic() - started < 5
    assert list((tmp_path / "fifos").iterdir()) == []


def test_stopping_while_the_reader_stalls_does_not_hang(tmp_path: Path) -> None:
    content = _parts(tmp_path / "data", 2)
    objects = [
        ChannelObject((tmp_path / "data" / key).as_uri(), key, OBJECT_SIZE)
        for key in sorted(content)
    ]
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", lambda _line: None).start()
    with open(channel.fifo(0), "rb") as fifo:
        fifo.read(1)  # then reads no more: the writer is stuck on a full pipe
        channel.stop(timeout=10)
        assert not channel.serving
    assert list((tmp_path / "fifos").iterdir()) == []


def test_a_corrupt_gzip_object_ends_the_stream_and_is_the_channels_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.gz").write_bytes(gzipped(b"good data "))
    (data / "b.gz").write_bytes(b"not gzip at all")
    (data / "c.gz").write_bytes(gzipped(b"never reached"))
    (config,) = instance_configs(
        tmp_path,
        {"train": {"uri": data.as_uri(), "input_mode": "Pipe", "compression": "Gzip"}},
    )
    said: list[str] = []
    inputs = channels.open_all(config, said.append)
    try:
        # The reader gets what came before the corrupt object, then EOF.
        assert _read_all(config.paths.data / "train_0") == b"good data "
        wait_for(lambda: inputs.error() is not None, "the channel's error")
        error = inputs.error()
        assert error is not None
        assert error.startswith(f"{(data / 'b.gz').as_uri()}: not a valid gzip object")
        assert any(line.startswith("Channel train: Pipe mode stopped: file://") for line in said)
        # No next epoch: a script waiting for one would wait forever.
        assert not (config.paths.data / "train_1").exists()
    finally:
        inputs.close()


def test_two_channels_stream_side_by_side(tmp_path: Path) -> None:
    train = _parts(tmp_path / "train", 2)
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "only").write_bytes(b"test data")
    (config,) = instance_configs(
        tmp_path,
        {
            "train": {"uri": (tmp_path / "train").as_uri(), "input_mode": "Pipe"},
            "test": {"uri": (tmp_path / "test").as_uri(), "input_mode": "Pipe"},
        },
    )
    inputs = _open(config)
    results: dict[str, bytes] = {}

    def read(name: str) -> None:
        results[name] = _read_all(config.paths.data / f"{name}_0")

    readers = [threading.Thread(target=read, args=(name,)) for name in ("train", "test")]
    try:
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(20)
        assert results == {"train": train["part-0"] + train["part-1"], "test": b"test data"}
    finally:
        inputs.close()
    assert not os.listdir(config.paths.data)


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_failed_start_leaves_no_descriptor_open(tmp_path: Path) -> None:
    fifos = tmp_path / "fifos"
    fifos.mkdir()
    (fifos / "train_0").write_text("something already there")
    channel = pipe.PipeChannel("train", [], fifos, lambda _line: None)
    before = _open_descriptors()
    with pytest.raises(channels.ChannelError, match="cannot make"):
        channel.start()
    assert _open_descriptors() == before
    channel.stop()  # what closing the inputs does; nothing to end


def test_a_writer_stuck_reading_storage_ends_after_that_read(tmp_path: Path) -> None:
    # The object is a FIFO this test writes into: the writer waits on storage for as long
    # as the test likes, where no stop can wake it.
    slow = tmp_path / "slow-object"
    os.mkfifo(slow)
    objects = [ChannelObject(slow.as_uri(), "slow", 0)]
    said: list[str] = []
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", said.append).start()
    before_stop = _open_descriptors()
    chunk = 1 << 20
    received = bytearray()
    first_chunk_read = threading.Event()

    def read() -> None:
        with open(channel.fifo(0), "rb") as fifo:
            while len(received) < chunk:
                received.extend(fifo.read(chunk - len(received)))
            first_chunk_read.set()
            received.extend(fifo.read())

    reader = threading.Thread(target=read)
    reader.start()
    with open(slow, "wb") as storage_side:  # opened once the writer streams the object
        storage_side.write(b"a" * chunk)
        storage_side.flush()
        assert first_chunk_read.wait(10)
        channel.stop(timeout=0.2)  # the writer is in the next read from storage
        assert any("did not stop in 0 s" in line for line in said)
        assert channel.serving
        storage_side.write(b"b" * chunk)  # the next chunk arrives, the stop is seen
        storage_side.flush()
        wait_for(lambda: not channel.serving, "the writer to end after its read")
    reader.join(10)
    assert not reader.is_alive()
    assert received == b"a" * chunk  # ended where it stopped
    # Its wake descriptors were closed by the writer itself, once it had ended.
    assert len(before_stop - _open_descriptors()) >= 2
    assert list((tmp_path / "fifos").iterdir()) == []


READER = """
import sys
print("opening", flush=True)
with open(sys.argv[1], "rb") as fifo:
    sys.stdout.write("read %d bytes" % len(fifo.read()))
"""


def test_a_reader_opening_the_next_epoch_as_the_stream_fails_is_not_stranded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.gz").write_bytes(b"not gzip")
    objects = [ChannelObject((data / "a.gz").as_uri(), "a", 8, gzip=True)]
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", lambda _line: None)
    next_fifo = channel.fifo(1)
    readers: list[subprocess.Popen[str]] = []
    real_open = os.open

    def open_then_let_a_reader_in(path: Any, flags: int, *args: Any) -> int:
        # The failing writer's own open of the next FIFO: a script's reader comes just
        # after it, before the FIFO is gone (the race, held open for the test).
        try:
            return real_open(path, flags, *args)
        finally:
            if Path(path) == next_fifo and not readers:
                reader = subprocess.Popen(
                    [sys.executable, "-c", READER, str(next_fifo)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                readers.append(reader)
                assert reader.stdout is not None
                assert reader.stdout.readline() == "opening\n"
                time.sleep(0.5)  # by now in open(2), waiting for a writer

    monkeypatch.setattr(pipe.os, "open", open_then_let_a_reader_in)
    channel.start()
    try:
        assert _read_all(channel.fifo(0)) == b""
        wait_for(lambda: channel.error is not None, "the stream to fail")
        [reader] = readers
        try:
            output, _ = reader.communicate(timeout=10)
        finally:
            reader.kill()
        assert output == "read 0 bytes"  # an empty epoch, not a wait for ever
        assert not next_fifo.exists()
    finally:
        channel.stop()
