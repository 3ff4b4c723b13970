"""The runtime (root) reads and writes the job's own directories without being tricked by
what the job's processes leave there: a link to a secret outside the instance, a FIFO no
one writes, a file of gigabytes, a directory swapped for a link while it is read.

The job's part is played by real processes and files, as a script would leave them; the
runtime's by the real entry point where a whole run shows it, else by the module that does
the reading or writing.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contract import storage, variables
from contract.archive import make_tarball
from contract.instance_config import InstanceConfig, load
from runtime.channels import pipe
from runtime.channels.channel_data import ChannelObject
from runtime.checkpoints import CheckpointSync, restore
from runtime.checkpoints.filewatch import Ready
from runtime.launch import handover
from runtime.reporting import failure
from tests.instances import launch_request, start_runtime, write_instances

SECRET = b"SECRET-TOKEN-3f9a1c7e"
# Sparse: a file this large costs no disk, and reading it whole would cost its size.
HUGE = 256 * 1024**2
# What reading a part of a file may take at most, well below HUGE.
SMALL_READ = 8 * 1024**2


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside every instance, as the machine's secrets are."""
    path = tmp_path / "machine" / "token"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)


def _peak_bytes(call: Callable[[], object]) -> tuple[object, int]:
    """What ``call`` returns, and the most memory Python held for it meanwhile."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _huge_file(path: Path, start: bytes, end: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(start)
        handle.truncate(HUGE - len(end))
        handle.seek(0, os.SEEK_END)
        handle.write(end)


@pytest.fixture
def unblock() -> Iterator[list[Path]]:
    """FIFOs a test's reader may be stuck on: opened for writing at the end, so that a
    thread blocked in open(2) on one goes on (it would otherwise never end)."""
    fifos: list[Path] = []
    yield fifos
    for fifo in fifos:
        with contextlib.suppress(OSError):  # no reader left
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _within(seconds: float, call: Callable[[], object]) -> object:
    """``call``'s result, failing the test if it has not returned within ``seconds``."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return result[0]


# -- output/failure, through the runtime ---------------------------------------------------

FAILING = """
import os, sys
failure = os.path.join(os.environ["SM_OUTPUT_DIR"], "failure")
{plant}
raise ValueError("the real cause")
"""


def _run(tmp_path: Path, script: str, exit_code: int = 1) -> tuple[Path, str]:
    """The runtime as a real process on ``script``; its base directory and its output."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    process = start_runtime(base)
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"the runtime hung:\n{output}") from None
    assert process.returncode == exit_code, output
    return base, output


def _reason(output: str) -> str:
    return output.partition("[runtime] Failed: ")[2]


def test_a_failure_file_linked_to_a_secret_is_not_read(tmp_path: Path, secret: Path) -> None:
    base, output = _run(tmp_path, FAILING.format(plant=f"os.symlink({str(secret)!r}, failure)"))
    assert SECRET.decode() not in output
    assert "ValueError: the real cause, exit code: 1" in _reason(output), output
    assert (base / "output" / "failure").is_symlink()
    assert secret.read_bytes() == SECRET


def test_a_failure_file_linked_to_nothing_is_not_written_through(tmp_path: Path) -> None:
    planted = tmp_path / "machine" / "ld.so.preload"
    planted.parent.mkdir()
    _base, output = _run(tmp_path, FAILING.format(plant=f"os.symlink({str(planted)!r}, failure)"))
    assert "ValueError: the real cause" in _reason(output), output
    assert not planted.exists()  # the runtime's reason went nowhere through the link


def test_a_fifo_as_failure_file_does_not_hang_the_runtime(tmp_path: Path) -> None:
    base, output = _run(tmp_path, FAILING.format(plant="os.mkfifo(failure)"))
    assert "ValueError: the real cause, exit code: 1" in _reason(output), output
    assert stat.S_ISFIFO((base / "output" / "failure").lstat().st_mode)


def test_a_huge_failure_file_is_read_only_as_far_as_a_reason_needs(tmp_path: Path) -> None:
    path = tmp_path / "output" / "failure"
    _huge_file(path, b"Traceback (most recent call last):\n", b"\nValueError: the real cause\n")

    text, peak = _peak_bytes(lambda: failure.reason(1, [], path))

    assert text == "Traceback (most recent call last):\nValueError: the real cause"
    assert peak < SMALL_READ


def test_the_runtimes_reason_replaces_a_link_left_as_failure_file(
    tmp_path: Path, secret: Path
) -> None:
    path = tmp_path / "output" / "failure"
    path.parent.mkdir()
    path.symlink_to(secret)
    failure.write_failure_file(path, "AlgorithmError: x, exit code: 1")
    assert secret.read_bytes() == SECRET
    assert not path.is_symlink()
    assert path.read_text() == "AlgorithmError: x, exit code: 1"


# -- the launch agents' files ----------------------------------------------------------------


def test_agent_notes_linked_to_a_secret_are_not_read(tmp_path: Path, secret: Path) -> None:
    base = tmp_path / "algo-1"
    (base / handover.FAILURES).parent.mkdir(parents=True)
    (base / handover.FAILURES).symlink_to(secret)
    (base / handover.LOST).symlink_to(secret)
    assert handover.failures(base) == []
    assert handover.lost(base) == []


def test_an_agent_note_that_is_a_fifo_does_not_block_the_runtime(
    tmp_path: Path, unblock: list[Path]
) -> None:
    base = tmp_path / "algo-1"
    (base / handover.LOST).parent.mkdir(parents=True)
    os.mkfifo(base / handover.LOST)
    unblock.append(base / handover.LOST)
    assert _within(10, lambda: handover.lost(base)) == []


def test_a_huge_agent_note_is_read_only_in_part(tmp_path: Path) -> None:
    base = tmp_path / "algo-1"
    first = "the daemon on algo-2 exited with status 1"
    _huge_file(base / handover.FAILURES, f"{first}\n".encode(), b"\n")

    notes, peak = _peak_bytes(lambda: handover.failures(base))

    assert isinstance(notes, list)
    assert notes[0] == first
    assert peak < SMALL_READ


def test_an_agent_does_not_append_through_a_link(tmp_path: Path) -> None:
    base = tmp_path / "algo-1"
    precious = tmp_path / "machine" / "passwd"
    precious.parent.mkdir()
    precious.write_text("root's own\n")
    (base / handover.FAILURES).parent.mkdir(parents=True)
    (base / handover.FAILURES).symlink_to(precious)
    handover.record_failure(
        "the daemon on algo-2 exited with status 1", {variables.BASE_DIR: str(base)}
    )
    assert precious.read_text() == "root's own\n"


def test_marking_ready_does_not_touch_through_a_link(tmp_path: Path) -> None:
    base = tmp_path / "algo-1"
    planted = tmp_path / "machine" / "nologin"
    planted.parent.mkdir()
    (base / handover.READY).parent.mkdir(parents=True)
    (base / handover.READY).symlink_to(planted)
    handover.mark_ready(base)
    assert not planted.exists()
    assert stat.S_ISREG((base / handover.READY).lstat().st_mode)
    assert handover.wait_until_ready(base, patience=0)


# -- checkpoints -----------------------------------------------------------------------------


class ScriptedWatcher:
    """Announces what the test hands it, as inotify announces a file closed after writing."""

    description = "scripted"

    def __init__(self) -> None:
        self.queued: list[Ready] = []
        self._lock = threading.Lock()

    def announce(self, path: Path) -> None:
        with self._lock:
            self.queued.append(Ready(path, 1))

    def changes(self, timeout: float) -> list[Ready]:
        with self._lock:
            ready, self.queued = self.queued, []
        if not ready:
            time.sleep(timeout)
        return ready

    def unchanged(self, ready: Ready) -> bool:
        return True

    def close(self) -> None:
        pass


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def has(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))


def _stored(store: Path) -> dict[str, bytes]:
    return {
        path.relative_to(store).as_posix(): path.read_bytes()
        for path in store.rglob("*")
        if path.is_file() and not path.name.startswith(".")
    }


def test_a_checkpoint_directory_swapped_for_a_link_is_not_read_through(
    tmp_path: Path, secret: Path
) -> None:
    local, store, log = tmp_path / "checkpoints", tmp_path / "store", Log()
    (local / "step-1").mkdir(parents=True)
    watcher = ScriptedWatcher()
    sync = CheckpointSync(local, store.as_uri(), log, watcher=watcher, scratch_dir=tmp_path)
    sync.start()
    try:
        # The script writes step-1/token and closes it; before the sync copies it, step-1
        # becomes a link to the directory of a file of that name outside the instance.
        (local / "step-1" / "token").write_bytes(b"the job's own")
        (local / "step-1").rename(local / "step-1.old")
        (local / "step-1").symlink_to(secret.parent)
        watcher.announce(local / "step-1" / "token")
        _wait_for(
            lambda: log.has("step-1/token not stored") or "step-1/token" in _stored(store),
            "the announced file handled",
        )
    finally:
        sync.stop()
    assert SECRET not in _stored(store).values()
    assert log.has(
        "Checkpoint step-1/token not stored: step-1 is a symbolic link, not a directory"
    ), log.lines
    assert _stored(store) == {"step-1.old/token": b"the job's own"}
    assert log.has(
        "passed over what is not a regular file, never following nor reading it: "
        "step-1 (a symbolic link)"
    )


def test_the_final_checkpoint_sync_names_the_links_and_fifos_it_passes_over(
    tmp_path: Path, secret: Path
) -> None:
    local, store, log = tmp_path / "checkpoints", tmp_path / "store", Log()
    local.mkdir()
    sync = CheckpointSync(local, store.as_uri(), log, scratch_dir=tmp_path).start()
    try:
        (local / "model.pt").write_bytes(b"weights")
        (local / "token.pt").symlink_to(secret)
        (local / "machine").symlink_to(secret.parent)
        os.mkfifo(local / "pipe.pt")
    finally:
        sync.stop()
    assert _stored(store) == {"model.pt": b"weights"}
    assert log.has(
        "Final checkpoint sync passed over what is not a regular file, never following nor "
        "reading it: machine (a symbolic link), pipe.pt (a FIFO), token.pt (a symbolic link)"
    ), log.lines


def _config(tmp_path: Path, checkpoint_uri: str) -> InstanceConfig:
    source = tmp_path / "src"
    source.mkdir(parents=True, exist_ok=True)
    request = launch_request(source, checkpoint_s3_uri=checkpoint_uri)
    return load(write_instances(tmp_path / "job", request)["algo-1"])


def test_restore_replaces_a_link_left_where_a_checkpoint_goes(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "latest").write_text("step-3")
    config = _config(tmp_path, kept.as_uri())
    precious = tmp_path / "machine" / "shadow"
    precious.parent.mkdir()
    precious.write_text("root's own")
    config.paths.checkpoints.mkdir(parents=True)
    (config.paths.checkpoints / "latest").symlink_to(precious)  # left by an earlier attempt

    restore(config, Log())

    assert precious.read_text() == "root's own"
    assert not (config.paths.checkpoints / "latest").is_symlink()
    assert (config.paths.checkpoints / "latest").read_text() == "step-3"


def test_restore_refuses_a_directory_left_as_a_link(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    (kept / "step-3").mkdir(parents=True)
    (kept / "step-3" / "model.pt").write_bytes(b"m" * 100)
    config = _config(tmp_path, kept.as_uri())
    elsewhere = tmp_path / "machine" / "etc"
    elsewhere.mkdir(parents=True)
    config.paths.checkpoints.mkdir(parents=True)
    (config.paths.checkpoints / "step-3").symlink_to(elsewhere)

    with pytest.raises(
        storage.StorageError,
        match=r"^restoring checkpoints from .*: step-3 is a symbolic link, not a directory$",
    ):
        restore(config, Log())
    assert list(elsewhere.iterdir()) == []


# -- the model tarball -----------------------------------------------------------------------


def test_links_in_the_model_are_stored_as_links(tmp_path: Path, secret: Path) -> None:
    script = f"""
import os
model = os.environ["SM_MODEL_DIR"]
with open(os.path.join(model, "weights.bin"), "wb") as f:
    f.write(b"weights")
os.symlink({str(secret)!r}, os.path.join(model, "token"))
os.symlink({str(secret.parent)!r}, os.path.join(model, "machine"))
os.mkfifo(os.path.join(model, "pipe"))
"""
    _run(tmp_path, script, exit_code=0)
    tarball = tmp_path / "artifacts" / "job-1" / "output" / "model.tar.gz"
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
        files = [m for m in members.values() if m.isfile()]
        contents = [data.read() for m in files if (data := tar.extractfile(m)) is not None]
    assert sorted(members) == ["machine", "pipe", "token", "weights.bin"]
    assert (members["token"].issym(), members["token"].linkname) == (True, str(secret))
    assert (members["machine"].issym(), members["machine"].linkname) == (True, str(secret.parent))
    assert members["pipe"].isfifo()
    assert contents == [b"weights"]


SWAPPER = """
import os, sys
model, secret, scratch = sys.argv[1:]
names = [f"weights-{i:02d}" for i in range(32)]
size = os.path.getsize(secret)
for name in names:
    with open(os.path.join(model, name), "wb") as f:
        f.write(b"w" * size)
print("ready", flush=True)
link, file = os.path.join(scratch, "link"), os.path.join(scratch, "file")
while True:
    for name in names:
        os.symlink(secret, link)
        os.replace(link, os.path.join(model, name))
        with open(file, "wb") as f:
            f.write(b"w" * size)
        os.replace(file, os.path.join(model, name))
"""
# How long the model is packed again and again while the files are swapped: unfixed, a
# file's bytes were read through a link about once a second here.
SWAP_SECONDS = 5.0


def test_a_model_file_swapped_for_a_link_while_packed_is_never_read_through(
    tmp_path: Path, secret: Path
) -> None:
    model, scratch = tmp_path / "model", tmp_path / "scratch"
    model.mkdir()
    scratch.mkdir()
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(model), str(secret), str(scratch)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline() == "ready\n"
        deadline, packed = time.monotonic() + SWAP_SECONDS, 0
        while time.monotonic() < deadline:
            tarball = make_tarball(model, tmp_path / "model.tar.gz")
            packed += 1
            with tarfile.open(tarball) as tar:
                for member in tar:
                    data = tar.extractfile(member) if member.isfile() else None
                    assert data is None or data.read() != SECRET, f"leaked at pack {packed}"
    finally:
        swapper.kill()
        swapper.communicate()
    assert packed > 10


# -- Pipe mode -------------------------------------------------------------------------------


def test_a_link_left_in_place_of_the_next_fifo_is_not_written_through(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    # Larger than a pipe's buffer: the writer waits on this epoch's reader, not yet at the
    # next FIFO, while the job replaces it.
    (tmp_path / "data" / "part-0").write_bytes(b"x" * 200_000)
    precious = tmp_path / "machine" / "passwd"
    precious.parent.mkdir()
    precious.write_text("root's own")
    objects = [ChannelObject((tmp_path / "data" / "part-0").as_uri(), "part-0", 200_000)]
    channel = pipe.PipeChannel("train", objects, tmp_path / "fifos", lambda _line: None).start()
    try:
        with open(channel.fifo(0), "rb") as fifo:
            # The next epoch's FIFO exists once this one is open: the job replaces it.
            _wait_for(lambda: channel.fifo(1).exists(), "the next epoch's FIFO")
            channel.fifo(1).unlink()
            channel.fifo(1).symlink_to(precious)
            assert fifo.read() == b"x" * 200_000
        _wait_for(
            lambda: channel.error is not None or precious.read_text() != "root's own",
            "the writer at the next epoch",
        )
    finally:
        channel.stop()
    assert precious.read_text() == "root's own"
    assert channel.error == (f"{channel.fifo(1)}: a symbolic link is there, not the channel's FIFO")
