"""FastFile mode: a real FUSE mount (this process serving /dev/fuse), read by other
processes; each file fetched on its first open, once; File mode where mounting is refused."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from runtime import channels
from runtime.channels import channel_data, fastfile
from runtime.channels.channel_data import ChannelObject
from runtime.linux import fuse, mounts
from tests.channels import files, gzipped, instance_configs, wait_for

BUCKET = "data"

pytestmark = pytest.mark.skipif(
    not os.path.exists(fastfile.DEVICE) or os.geteuid() != 0,
    reason="FUSE mounts need /dev/fuse and root",
)

# What a script sees: the tree, each file's size, and (for the named ones) their content.
LOOK = """
import json, os, sys
root = sys.argv[1]
seen = {}
for directory, _dirs, names in os.walk(root):
    for name in names:
        path = os.path.join(directory, name)
        seen[os.path.relpath(path, root)] = os.stat(path).st_size
read = {}
for name in sys.argv[2:]:
    with open(os.path.join(root, name), "rb") as f:
        read[name] = f.read().decode("latin-1")
print(json.dumps({"sizes": seen, "read": read}))
"""


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Callable[..., fastfile.FastFileChannel]]:
    """Mounts a channel for the test; every mount is gone after it, whatever happened."""
    made: list[fastfile.FastFileChannel] = []

    def mount(objects: list[ChannelObject], **options: Any) -> fastfile.FastFileChannel:
        channel = fastfile.FastFileChannel(
            "train",
            objects,
            tmp_path / "mnt",
            tmp_path / "cache",
            options.pop("say", lambda _line: None),
            **options,
        )
        made.append(channel.mount())
        return channel

    yield mount
    for channel in made:
        channel.stop()
    mounts.unmount_under(tmp_path)  # a test that failed before stop() leaves nothing


def _objects(root: Path, gzip: bool = False) -> list[ChannelObject]:
    return [
        ChannelObject(item.uri, channel_data.landing_key(item.relative, gzip), item.size, gzip)
        for item in storage.listing(root.as_uri())
    ]


def _write(root: Path, content: dict[str, bytes]) -> Path:
    for name, data in content.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _look(mountpoint: Path, *names: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", LOOK, str(mountpoint), *names],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout)
    return seen


def test_files_are_fetched_when_first_opened_and_only_then(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    big = os.urandom(700_000)  # several READ requests
    source = _write(tmp_path / "data", {"a.csv": b"1,2\n", "sub/big.bin": big, "c": b"ccc"})
    channel = mounted(_objects(source))
    assert (tmp_path / "mnt").resolve().as_posix() in mounts.mount_points()

    # Listing and stat fetch nothing: the tree and sizes come from the listing.
    seen = _look(tmp_path / "mnt")
    assert seen["sizes"] == {"a.csv": 4, "sub/big.bin": 700_000, "c": 3}
    assert channel.tree.fetched == 0
    assert files(tmp_path / "cache") == {}

    result = subprocess.run(
        ["cat", str(tmp_path / "mnt" / "sub" / "big.bin")], capture_output=True, timeout=30
    )
    assert result.stdout == big
    assert channel.tree.fetched == 1
    assert files(tmp_path / "cache") == {"sub/big.bin": big}

    # Read again, by another process: from the cache, not fetched again.
    assert _look(tmp_path / "mnt", "a.csv", "sub/big.bin")["read"]["a.csv"] == "1,2\n"
    assert channel.tree.fetched == 2
    assert sorted(files(tmp_path / "cache")) == ["a.csv", "sub/big.bin"]
    assert channel.session is not None
    assert channel.session.requests[fuse.Opcode.INIT] == 1


def test_concurrent_first_opens_fetch_the_file_once(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    source = _write(tmp_path / "data", {"shared.bin": b"s" * 100_000})
    fetches: list[str] = []
    channel: fastfile.FastFileChannel | None = None

    def slow_fetch(item: ChannelObject, target: Path) -> None:
        fetches.append(item.key)
        # Hold the first fetch until the second reader's OPEN has arrived too.
        session = channel.session if channel is not None else None
        assert session is not None
        wait_for(lambda: session.requests[fuse.Opcode.OPEN] >= 2, "the second OPEN")
        channel_data.land(item, target)

    channel = mounted(_objects(source), fetch=slow_fetch)
    readers = [
        subprocess.Popen(["cat", str(tmp_path / "mnt" / "shared.bin")], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    for reader in readers:
        output, _ = reader.communicate(timeout=30)
        assert output == b"s" * 100_000
    assert fetches == ["shared.bin"]


def test_a_gzipped_file_is_served_gunzipped_with_its_real_size(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    content = os.urandom(1000) * 300
    source = _write(tmp_path / "data", {"rows.bin.gz": gzipped(content)})
    mounted(_objects(source, gzip=True))
    # Before the first open the size is the stored one; the content is what it holds.
    seen = _look(tmp_path / "mnt", "rows.bin")
    assert seen["read"]["rows.bin"].encode("latin-1") == content
    assert _look(tmp_path / "mnt")["sizes"] == {"rows.bin": len(content)}


def test_a_channel_on_s3_fetches_only_what_is_read(
    tmp_path: Path, s3: Any, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    for i in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"train/part-{i}", Body=f"part {i}".encode())
    objects = [
        ChannelObject(item.uri, item.relative, item.size)
        for item in storage.listing(f"s3://{BUCKET}/train")
    ]
    channel = mounted(objects)
    assert _look(tmp_path / "mnt", "part-1")["read"] == {"part-1": "part 1"}
    assert files(tmp_path / "cache") == {"part-1": b"part 1"}
    assert channel.tree.fetched == 1


def test_a_failed_fetch_is_an_io_error_and_the_channels_error(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    source = _write(tmp_path / "data", {"here": b"x", "gone": b"y"})
    said: list[str] = []
    channel = mounted(_objects(source), say=said.append)
    (source / "gone").unlink()  # listed, then lost before it was read
    result = subprocess.run(
        ["cat", str(tmp_path / "mnt" / "gone")], capture_output=True, text=True, timeout=30
    )
    assert result.returncode != 0
    assert "Input/output error" in result.stderr
    assert channel.error == f"{(source / 'gone').as_uri()}: cannot read (No such file or directory)"
    assert said == [f"Channel train: FastFile could not fetch a file: {channel.error}"]
    assert files(tmp_path / "cache") == {}


def test_the_mount_is_read_only(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    source = _write(tmp_path / "data", {"a": b"a"})
    mounted(_objects(source))
    result = subprocess.run(
        [
            "sh",
            "-c",
            f"echo x > {tmp_path}/mnt/new; echo x >> {tmp_path}/mnt/a; mkdir {tmp_path}/mnt/d",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stderr.count("Read-only file system") == 3, result.stderr
    assert _look(tmp_path / "mnt", "a")["read"] == {"a": "a"}


def test_stop_unmounts_even_while_a_reader_holds_a_file(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    source = _write(tmp_path / "data", {"a": b"a" * 10})
    channel = mounted(_objects(source))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; f = open(sys.argv[1], 'rb'); print(f.read(1).decode(), flush=True); "
            "sys.stdin.readline()",
            str(tmp_path / "mnt" / "a"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "a\n"  # the file is open, the mount busy
        channel.stop()
        assert (tmp_path / "mnt").resolve().as_posix() not in mounts.mount_points()
        assert channel.session is None
        assert list((tmp_path / "mnt").iterdir()) == []  # the plain directory again
    finally:
        holder.communicate("\n", timeout=30)


def test_open_all_mounts_fastfile_channels_until_closed(tmp_path: Path) -> None:
    source = _write(tmp_path / "data", {"x.csv": b"x"})
    (config,) = instance_configs(
        tmp_path, {"train": {"uri": source.as_uri(), "input_mode": "FastFile"}}
    )
    said: list[str] = []
    inputs = channels.open_all(config, said.append)
    mountpoint = (config.paths.data / "train").resolve().as_posix()
    try:
        assert mountpoint in mounts.mount_points()
        assert _look(config.paths.data / "train", "x.csv")["read"] == {"x.csv": "x"}
        assert files(config.paths.input / ".fastfile" / "train") == {"x.csv": b"x"}
        assert said[-1] == f"Channel train: 1 files mounted at {config.paths.data / 'train'}"
    finally:
        inputs.close()
        mounts.unmount_under(tmp_path)
    assert mountpoint not in mounts.mount_points()


def test_a_refused_mount_falls_back_to_file_mode(tmp_path: Path) -> None:
    source = _write(tmp_path / "data", {"x.csv": b"x", "sub/y.csv": b"yy"})
    (config,) = instance_configs(
        tmp_path, {"train": {"uri": source.as_uri(), "input_mode": "FastFile"}}
    )
    attempts: list[Path] = []

    def refuse(mountpoint: Path, _fd: int) -> None:
        attempts.append(mountpoint)  # as an unprivileged pod's mount(2) answers
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(mountpoint))

    said: list[str] = []
    inputs = channels.open_all(config, said.append, mount=refuse)
    inputs.close()
    assert attempts == [config.paths.data / "train"]
    fallback = [line for line in said if "falling back" in line]
    assert fallback == [
        "Channel train: FastFile needs a FUSE mount, which this instance cannot make "
        "(Operation not permitted); falling back to File mode: downloading the channel now"
    ]
    assert files(config.paths.data / "train") == {"sub/y.csv": b"yy", "x.csv": b"x"}
    assert (config.paths.data / "train").resolve().as_posix() not in mounts.mount_points()
    assert said[-1].startswith("Channel train: 2 objects, 3 B in ")


def _fuse_descriptors() -> list[str]:
    fds = Path("/proc/self/fd")
    return [fd.name for fd in fds.iterdir() if os.path.realpath(fd) == fastfile.DEVICE]


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("can't start new thread"), OSError(errno.EMFILE, "Too many open files")],
)
def test_a_mount_that_cannot_be_served_is_taken_down_not_left_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    source = _write(tmp_path / "data", {"x.csv": b"x"})
    mountpoint = tmp_path / "mnt"

    def cannot_serve(_session: fuse.Session) -> fuse.Session:
        raise failure  # the mount is made by now: nothing would ever answer its requests

    # Threads that will not start cannot be had on demand: the one stand-in here.
    monkeypatch.setattr(fuse.Session, "start", cannot_serve)
    try:
        # Not File mode's fallback: it would download into a mount nobody serves.
        with pytest.raises(channels.ChannelError, match="could not serve the FastFile mount"):
            fastfile.serve(
                "train", _objects(source), mountpoint, tmp_path / "cache", lambda _line: None
            )
        assert mountpoint.as_posix() not in mounts.mount_points()
        assert _fuse_descriptors() == []
    finally:
        mounts.unmount_under(tmp_path)


def test_readdir_pages_through_a_large_directory(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    # More entries than one READDIR answer holds: the listing resumes at each offset.
    names = [f"file-with-a-long-name-{i:04d}.csv" for i in range(600)]
    objects = [ChannelObject(f"file:///unused/{name}", name, i) for i, name in enumerate(names)]
    channel = mounted(objects)
    assert _look(tmp_path / "mnt")["sizes"] == {name: i for i, name in enumerate(names)}
    assert channel.session is not None
    assert channel.session.requests[fuse.Opcode.READDIR] > 2
    assert channel.tree.fetched == 0


def test_concurrent_readers_of_different_files_do_not_wait_for_each_other(
    tmp_path: Path, mounted: Callable[..., fastfile.FastFileChannel]
) -> None:
    source = _write(tmp_path / "data", {"slow": b"slow", "fast": b"fast"})
    release = threading.Event()

    def fetch(item: ChannelObject, target: Path) -> None:
        if item.key == "slow":
            release.wait(30)  # held until the other file has been read
        channel_data.land(item, target)

    mounted(_objects(source), fetch=fetch)
    slow = subprocess.Popen(["cat", str(tmp_path / "mnt" / "slow")], stdout=subprocess.PIPE)
    try:
        assert _look(tmp_path / "mnt", "fast")["read"] == {"fast": "fast"}
    finally:
        release.set()
    assert slow.communicate(timeout=30)[0] == b"slow"
