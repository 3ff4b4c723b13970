"""runtime.checkpoints: restore before the script, uploads while it runs, a final sync.

The files are written by a real process, as a training script writes them, into a real
directory; the store is a file:// directory or moto's S3 server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contract import storage
from contract.instance_config import InstanceConfig, load
from runtime.checkpoints import CheckpointSync, restore, start_sync
from runtime.checkpoints.filewatch import (
    InotifyWatcher,
    NotWhole,
    PollingWatcher,
    Ready,
    Watcher,
    copy_whole,
)
from tests.instances import launch_request, write_instances
from tests.runtime.uploads import kill_an_upload

BUCKET = "checkpoints"
FAST_RETRIES = (0.01, 0.01)

# Three versions of slow.pt, each written in chunks with flushes and a pause between, the
# next one truncating the file right after the last closed it.
WRITER = """
import os, sys, time
root = sys.argv[1]
def write(relative, data, chunks=1):
    path = os.path.join(root, relative)
    with open(path, "wb") as f:
        step = len(data) // chunks
        for i in range(chunks):
            f.write(data[i * step : (i + 1) * step] if i < chunks - 1 else data[i * step :])
            f.flush()
            if i < chunks - 1:
                time.sleep(0.03)
write("first.pt", b"1" * 1000)
os.makedirs(os.path.join(root, "step-2", "shards"))
write("step-2/shards/rank-0.pt", b"s" * 5000)
write("model.pt.tmp", b"m" * 3000)
os.replace(os.path.join(root, "model.pt.tmp"), os.path.join(root, "model.pt"))
for version in b"ABC":
    write("slow.pt", bytes([version]) * 400_000, chunks=4)
"""
SLOW_VERSIONS = {bytes([version]) * 400_000 for version in b"ABC"}
WRITTEN = {
    "first.pt": b"1" * 1000,
    "step-2/shards/rank-0.pt": b"s" * 5000,
    "model.pt": b"m" * 3000,
    "slow.pt": b"C" * 400_000,
}


class Log:
    """The lines the sync says, from whichever thread, with a way to wait for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)

    def has(self, text: str) -> bool:
        with self._lock:
            return any(text in line for line in self.lines)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)


def run_writer(script: str, root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", script, str(root)])


def stored(store: Path) -> dict[str, bytes]:
    return {
        path.relative_to(store).as_posix(): path.read_bytes()
        for path in store.rglob("*")
        if path.is_file() and not path.name.startswith(".")  # put_file's own temporaries
    }


@pytest.fixture
def local(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def log() -> Log:
    return Log()


@pytest.fixture
def sync_of(local: Path, store: Path, log: Log, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Starts a sync of ``local`` to ``store``; stops whatever a test left running."""
    started: list[CheckpointSync] = []

    def start(watcher: Watcher | None = None, **options: Any) -> CheckpointSync:
        local.mkdir(exist_ok=True)
        sync = CheckpointSync(
            local, store.as_uri(), log, watcher=watcher, scratch_dir=tmp_path, **options
        )
        started.append(sync.start())
        return sync

    yield start
    for sync in started:
        sync.stop()


def test_files_are_stored_whole_once_complete(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    sync = sync_of()
    writer = run_writer(WRITER, local)
    seen: set[bytes] = set()
    while writer.poll() is None:  # look at the stored object while it is being rewritten
        slow = store / "slow.pt"
        if slow.exists():
            seen.add(slow.read_bytes())
        time.sleep(0.002)
    assert writer.returncode == 0
    wait_for(lambda: stored(store) == WRITTEN, "every file stored as last written")

    assert seen <= SLOW_VERSIONS
    # Every upload the sync made of slow.pt was of a whole version: never a part of one.
    assert {u.size for u in sync.uploads if u.relative == "slow.pt"} <= {400_000}
    assert log.has("(inotify)")
    assert all(0 <= lag < 10 for lag in sync.lags)
    assert sync.stop() == 0  # nothing was left for the final sync
    assert log.has("Final checkpoint sync stored 0 file(s)")


@pytest.mark.parametrize("kind", ["inotify", "polling"])
def test_a_temporary_name_renamed_away_is_not_announced(local: Path, kind: str) -> None:
    local.mkdir()
    watcher: Watcher = InotifyWatcher(local) if kind == "inotify" else PollingWatcher(local, 0)
    script = """
import os, sys
root = sys.argv[1]
with open(os.path.join(root, "ckpt.tmp"), "wb") as f:
    f.write(b"x" * 100)
os.replace(os.path.join(root, "ckpt.tmp"), os.path.join(root, "ckpt.pt"))
os.makedirs(os.path.join(root, "step-1.partial", "shards"))
with open(os.path.join(root, "step-1.partial", "shards", "0.pt"), "wb") as f:
    f.write(b"y")
os.rename(os.path.join(root, "step-1.partial"), os.path.join(root, "step-1"))
"""
    assert run_writer(script, local).wait(timeout=30) == 0
    try:
        announced = [ready.path for _ in range(2) for ready in watcher.changes(0)]
    finally:
        watcher.close()
    # A directory renamed into place counts as complete, as a renamed file does.
    assert sorted(announced) == [local / "ckpt.pt", local / "step-1" / "shards" / "0.pt"]


HOLDING_WRITER = """
import os, sys
path = os.path.join(sys.argv[1], "new-dir", "big.pt")
os.makedirs(os.path.dirname(path))
with open(path, "wb") as f:
    f.write(b"half")
    f.flush()
    print("written", flush=True)
    sys.stdin.readline()
    f.write(b" and the rest")
"""


def _start_holding_writer(local: Path) -> subprocess.Popen[str]:
    """A process that writes half a file into a new directory and keeps it open until
    told to finish."""
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLDING_WRITER, str(local)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "written\n"
    return writer


def _finish(writer: subprocess.Popen[str]) -> None:
    writer.communicate("go\n", timeout=30)
    assert writer.returncode == 0


def test_a_file_open_for_writing_is_not_copied(local: Path, tmp_path: Path) -> None:
    local.mkdir()
    writer = _start_holding_writer(local)
    try:
        with pytest.raises(NotWhole, match=r"^open for writing$"):
            copy_whole(local / "new-dir" / "big.pt", tmp_path / "copy")
    finally:
        _finish(writer)
    assert copy_whole(local / "new-dir" / "big.pt", tmp_path / "copy")[0] == 17
    assert (tmp_path / "copy").read_bytes() == b"half and the rest"


def test_a_file_found_half_written_in_a_new_directory_waits_for_its_close(local: Path) -> None:
    local.mkdir()
    watcher = InotifyWatcher(local)
    try:
        writer = _start_holding_writer(local)
        try:
            # The directory's watch came after the file was opened and written to.
            assert watcher.changes(0) == []
        finally:
            _finish(writer)
        announced = [ready.path for ready in watcher.changes(5)]
    finally:
        watcher.close()
    assert announced == [local / "new-dir" / "big.pt"]


def test_polling_when_inotify_is_not_used(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    local.mkdir()
    sync = sync_of(watcher=PollingWatcher(local, interval=0.05))
    script = """
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "a", "b"))
with open(os.path.join(root, "a", "b", "deep.pt"), "wb") as f:
    f.write(b"d" * 2000)
with open(os.path.join(root, "top.tmp"), "wb") as f:
    f.write(b"t" * 10)
os.replace(os.path.join(root, "top.tmp"), os.path.join(root, "top.pt"))
"""
    assert run_writer(script, local).wait(timeout=30) == 0
    wanted = {"a/b/deep.pt": b"d" * 2000, "top.pt": b"t" * 10}
    # An upload is counted once its object is stored: wait for both.
    wait_for(
        lambda: (
            stored(store) == wanted
            and sorted(u.relative for u in sync.uploads) == ["a/b/deep.pt", "top.pt"]
        ),
        "the polled files stored, once each",
    )
    assert log.has("(polling every 0.05 s)")


def test_the_final_sync_stores_what_was_not_yet_uploaded(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    local.mkdir()
    (local / "restored.pt").write_bytes(b"from the store")  # there before the sync starts
    # A watcher that never gets round to looking: only the final sync can store anything.
    sync = sync_of(watcher=PollingWatcher(local, interval=3600))
    script = "import sys; open(sys.argv[1] + '/last.pt', 'wb').write(b'last words')"
    assert run_writer(script, local).wait(timeout=30) == 0
    assert stored(store) == {}

    assert sync.stop() == 1
    assert stored(store) == {"last.pt": b"last words"}  # restored.pt is stored already
    assert log.has("Final checkpoint sync stored 1 file(s)")
    assert [u.final for u in sync.uploads] == [True]


def test_a_rewrite_right_before_stop_is_stored(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path
) -> None:
    sync = sync_of()
    script = """
import sys
for version in (b"old", b"new"):
    with open(sys.argv[1] + "/state.pt", "wb") as f:
        f.write(version * 100_000)
"""
    assert run_writer(script, local).wait(timeout=30) == 0
    sync.stop()
    assert stored(store) == {"state.pt": b"new" * 100_000}


def test_an_upload_that_keeps_failing_is_logged_and_the_rest_go_on(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    store.mkdir()
    (store / "broken").write_text("a file where the upload needs a directory")
    sync = sync_of(retry_delays=FAST_RETRIES)
    script = """
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "broken"))
open(os.path.join(root, "broken", "x.pt"), "wb").write(b"x")
open(os.path.join(root, "fine.pt"), "wb").write(b"f")
"""
    assert run_writer(script, local).wait(timeout=30) == 0
    bad_uri = f"{store.as_uri()}/broken/x.pt"
    wait_for(lambda: log.has(f"Could not store checkpoint at {bad_uri}"), "the failure logged")
    wait_for(lambda: (store / "fine.pt").exists(), "the next file stored")
    assert log.has("(attempt 1 of 3: ")
    assert sync.failed == [bad_uri]

    assert sync.stop() == 0  # tried once more, failed again: logged, not raised
    assert log.has("Final checkpoint sync stored 0 file(s), 0 bytes, in ")
    assert log.has("; 1 could not be stored")
    assert sync.failed == [bad_uri, bad_uri]


def test_an_upload_is_retried_until_the_store_takes_it(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    store.mkdir()
    blocker = store / "blocked"
    blocker.write_text("in the way")
    sync_of(retry_delays=(0.1,) * 50)
    script = """
import os, sys
os.makedirs(sys.argv[1] + "/blocked")
open(sys.argv[1] + "/blocked/x.pt", "wb").write(b"x")
"""
    assert run_writer(script, local).wait(timeout=30) == 0
    wait_for(lambda: log.has("retrying in 0.1 s"), "a failed attempt")
    blocker.unlink()
    wait_for(lambda: stored(store) == {"blocked/x.pt": b"x"}, "stored on a later attempt")
    assert not log.has("Could not store")


def test_names_with_uri_characters_are_stored_under_those_names(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, tmp_path: Path
) -> None:
    names = ["model#3.pt", "what?.pt", "100%.pt", "%2e%2e/%2e%2e/escape.pt"]
    sync = sync_of()
    script = """
import os, sys
for name in sys.argv[2:]:
    path = os.path.join(sys.argv[1], name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(name.encode())
"""
    writer = subprocess.run([sys.executable, "-c", script, str(local), *names], timeout=30)
    assert writer.returncode == 0
    wanted = {name: name.encode() for name in names}
    wait_for(lambda: stored(store) == wanted, "every file stored under its own name")
    sync.stop()
    assert stored(store) == wanted
    assert not (tmp_path.parent / "escape.pt").exists()
    assert sync.failed == []


RECREATING_WRITER = """
import os, shutil, sys
root = sys.argv[1]
shutil.rmtree(root)  # the checkpoint directory taken down and made again
os.makedirs(root)
with open(os.path.join(root, "fresh.pt"), "wb") as f:
    f.write(b"after the rmtree")
"""


def test_files_written_while_inotify_fails_are_stored_before_the_final_sync(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    store.mkdir()
    (store / "busy").write_text("a file where the upload needs a directory")
    # Each failed attempt keeps the upload thread away from inotify for a second.
    sync = sync_of(retry_delays=(1.0, 1.0))
    script = (
        "import os, sys; os.makedirs(sys.argv[1] + '/busy'); open(sys.argv[1] + '/busy/x', 'w')"
    )
    assert run_writer(script, local).wait(timeout=30) == 0
    wait_for(lambda: log.has("retrying in 1 s"), "the thread kept busy")
    # Done while the thread is away: the watched directory is gone, fresh.pt complete.
    assert run_writer(RECREATING_WRITER, local).wait(timeout=30) == 0

    wait_for(lambda: (store / "fresh.pt").exists(), "fresh.pt stored")
    assert (store / "fresh.pt").read_bytes() == b"after the rmtree"
    assert log.has("Checkpoint uploads go on by polling every 1 s: inotify stopped working")
    sync.stop()
    assert [u.relative for u in sync.uploads] == ["fresh.pt"]
    assert not sync.uploads[0].final


class _FailingWatcher:
    """inotify as it fails where it cannot read a directory: an error that is no
    InotifyError, once the test has written its file."""

    description = "inotify"

    def __init__(self) -> None:
        self.written = threading.Event()

    def changes(self, timeout: float) -> list[Ready]:
        if self.written.wait(timeout):
            raise PermissionError(13, "Permission denied", "a new directory")
        return []

    def unchanged(self, ready: Ready) -> bool:
        return False

    def close(self) -> None:
        pass


def test_any_watcher_error_falls_back_to_polling(
    sync_of: Callable[..., CheckpointSync], local: Path, store: Path, log: Log
) -> None:
    watcher = _FailingWatcher()
    sync = sync_of(watcher=watcher)
    script = "import sys; open(sys.argv[1] + '/epoch-1.pt', 'wb').write(b'one')"
    assert run_writer(script, local).wait(timeout=30) == 0
    watcher.written.set()

    wait_for(lambda: stored(store) == {"epoch-1.pt": b"one"}, "stored by polling")
    assert log.has("inotify stopped working: [Errno 13] Permission denied")
    assert not log.has("Checkpoint uploads stopped")
    sync.stop()
    assert [u.final for u in sync.uploads] == [False]


def test_start_sync_names_a_checkpoint_directory_it_cannot_make(tmp_path: Path) -> None:
    config = _config(tmp_path, (tmp_path / "kept").as_uri())
    config.paths.checkpoints.parent.mkdir(parents=True, exist_ok=True)
    config.paths.checkpoints.write_text("a file where the directory goes")
    with pytest.raises(
        storage.StorageError, match=f"^storing checkpoints from {config.paths.checkpoints} at "
    ):
        start_sync(config, Log())


# -- restore -------------------------------------------------------------------------------


def _config(tmp_path: Path, checkpoint_uri: str) -> InstanceConfig:
    source = tmp_path / "src"
    source.mkdir(parents=True, exist_ok=True)
    request = launch_request(source, checkpoint_s3_uri=checkpoint_uri)
    return load(write_instances(tmp_path / "job", request)["algo-1"])


def test_restore_copies_the_stored_tree_from_a_directory(tmp_path: Path, log: Log) -> None:
    kept = tmp_path / "kept"
    (kept / "step-3" / "shards").mkdir(parents=True)
    (kept / "latest").write_text("step-3")
    (kept / "step-3" / "shards" / "0.pt").write_bytes(b"0" * 2048)
    config = _config(tmp_path, kept.as_uri())

    restored = restore(config, log)

    assert restored is not None
    assert (restored.files, restored.bytes) == (2, 2054)
    assert stored(config.paths.checkpoints) == {
        "latest": b"step-3",
        "step-3/shards/0.pt": b"0" * 2048,
    }
    assert log.has(f"Restored 2 checkpoint file(s), 2054 bytes, from {kept.as_uri()} into ")


def test_restore_of_nothing_yet_starts_fresh(tmp_path: Path, log: Log) -> None:
    config = _config(tmp_path, (tmp_path / "not-yet").as_uri())
    restored = restore(config, log)
    assert restored is not None
    assert (restored.files, restored.bytes) == (0, 0)
    assert log.has(f"No checkpoints under {config.spec.checkpoint_s3_uri} yet: starting fresh")
    assert stored(config.paths.checkpoints) == {}


@pytest.fixture
def s3(s3_client: Any) -> Any:
    s3_client.create_bucket(Bucket=BUCKET)
    return s3_client


def test_restore_from_s3(s3: Any, tmp_path: Path, log: Log) -> None:
    for key, body in {"job/ckpt/latest": b"2", "job/ckpt/step-2/model.pt": b"m" * 100}.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    s3.put_object(Bucket=BUCKET, Key="job/ckpt-other/x", Body=b"not ours")
    config = _config(tmp_path, f"s3://{BUCKET}/job/ckpt")

    restored = restore(config, log)

    assert restored is not None
    assert (restored.files, restored.bytes) == (2, 101)
    assert stored(config.paths.checkpoints) == {"latest": b"2", "step-2/model.pt": b"m" * 100}
    fresh = restore(_config(tmp_path / "second", f"s3://{BUCKET}/job/empty"), log)
    assert fresh is not None
    assert (fresh.files, fresh.bytes) == (0, 0)
    assert log.has(f"No checkpoints under s3://{BUCKET}/job/empty yet: starting fresh")


def test_restore_refuses_keys_that_leave_the_directory(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="ckpt/../../escape", Body=b"evil")
    s3.put_object(Bucket=BUCKET, Key="ckpt/fine", Body=b"ok")
    config = _config(tmp_path, f"s3://{BUCKET}/ckpt")
    with pytest.raises(
        storage.StorageError, match=f"^restoring checkpoints: s3://{BUCKET}/ckpt: refused object"
    ):
        restore(config, Log())
    assert stored(config.paths.checkpoints) == {}


def test_sync_to_s3(s3: Any, tmp_path: Path, local: Path, log: Log) -> None:
    local.mkdir()
    sync = CheckpointSync(local, f"s3://{BUCKET}/job/ckpt", log, scratch_dir=tmp_path).start()
    try:
        script = """
import os, sys
os.makedirs(sys.argv[1] + "/step-1")
with open(sys.argv[1] + "/step-1/model.pt", "wb") as f:
    for _ in range(4):
        f.write(b"w" * 250_000)
        f.flush()
"""
        assert run_writer(script, local).wait(timeout=30) == 0
    finally:
        sync.stop()
    body = s3.get_object(Bucket=BUCKET, Key="job/ckpt/step-1/model.pt")["Body"].read()
    assert body == b"w" * 1_000_000
    assert log.has(f"stored at s3://{BUCKET}/job/ckpt/step-1/model.pt (1.0 MB,")


def test_restore_skips_what_a_killed_upload_left(tmp_path: Path, log: Log) -> None:
    kept = tmp_path / "kept"
    whole, bigger = tmp_path / "whole.pt", tmp_path / "bigger.pt"
    whole.write_bytes(b"w" * 500)
    bigger.write_bytes(b"b" * 5000)
    storage.put_file(whole, storage.join(kept.as_uri(), "step-1", "model.pt"))
    kill_an_upload(bigger, storage.join(kept.as_uri(), "step-1", "model.pt"))
    assert len(os.listdir(kept / "step-1")) == 2  # the model and the cut-off copy
    config = _config(tmp_path, kept.as_uri())

    restored = restore(config, log)

    assert restored is not None
    assert (restored.files, restored.bytes) == (1, 500)
    local = config.paths.checkpoints
    assert [p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()] == [
        "step-1/model.pt"
    ]


def test_a_file_s3_cannot_name_fails_alone(s3: Any, tmp_path: Path, local: Path, log: Log) -> None:
    local.mkdir()
    sync = CheckpointSync(
        local, f"s3://{BUCKET}/ckpt", log, scratch_dir=tmp_path, retry_delays=FAST_RETRIES
    ).start()
    try:
        script = """
import os, sys, time
root = os.fsencode(sys.argv[1])
open(os.path.join(root, b"caf\\xe9.pt"), "wb").write(b"latin-1 name")
time.sleep(0.5)
open(os.path.join(root, b"later.pt"), "wb").write(b"still stored")
"""
        assert run_writer(script, local).wait(timeout=30) == 0
        bad_uri = f"s3://{BUCKET}/ckpt/" + os.fsdecode(b"caf\xe9.pt")
        wait_for(
            lambda: log.has("stored at s3://checkpoints/ckpt/later.pt"), "the next file stored"
        )
        assert sync.failed == [bad_uri]
        assert not log.has("Checkpoint uploads stopped")
    finally:
        final = sync.stop()  # tries the file again, fails again: logged, never raised
    assert final == 0
    assert sync.failed == [bad_uri, bad_uri]
    assert log.has("; 1 could not be stored")
    body = s3.get_object(Bucket=BUCKET, Key="ckpt/later.pt")["Body"].read()
    assert body == b"still stored"
