"""Checkpoints that outlive an instance, kept the way SageMaker keeps ``checkpoint_s3_uri``.

Before the script starts, every instance copies what is stored under the job's checkpoint
URI into its local checkpoint directory (SM_CHECKPOINT_DIR): a restarted job resumes where
it left off, and a first attempt finds nothing and starts fresh. While the script runs, a
background thread stores every file there that is new or changed, once it is complete, at
the URI plus its path below the directory. When the script has ended, however it ended, a
final sync stores whatever the thread had not.

Complete means closed after writing, or renamed into place (how that is seen:
``runtime.checkpoints.filewatch``). A file is copied aside before it is uploaded, and the
copy kept only if no process was writing the file meanwhile: a stored object is never
torn between two writes. It is only as whole as the writer left it, though: a writer
killed mid-write closes the file too, and that truncated file is stored. Scripts should
write each checkpoint under a temporary name and rename it into place
(``torch.save(state, "x.tmp"); os.replace("x.tmp", "x.pt")``): the name then only ever
holds a whole file.

As on SageMaker, every instance uploads to the same prefix. Scripts usually write
checkpoints on one rank only; where instances write the same relative path, the last
upload wins. Files deleted locally stay stored.

The directory is the job's, and the runtime that reads and writes it is root: below the
directory no link is ever followed (a link, a FIFO or anything else not a regular file is
not uploaded, and the sync says so), and restored files are moved into place without
writing through a link the job left there (``contract.untrusted``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from contract import storage, untrusted
from contract.instance_config import InstanceConfig
from runtime.checkpoints.filewatch import (
    NotFollowed,
    NotWhole,
    PollingWatcher,
    Ready,
    StatKey,
    Watcher,
    copy_whole,
    default_watcher,
    scan,
    stat_key,
    survey,
)

Say = Callable[[str], None]

RETRY_DELAYS = (1.0, 3.0, 9.0)
# How often the upload thread looks up from waiting to see whether it must stop.
WAKE_INTERVAL = 0.1
# How many of the entries the final sync passes over (links, FIFOs) it names.
NAMED_SKIPS = 5


@dataclass(frozen=True)
class Restored:
    files: int
    bytes: int
    seconds: float


def restore(config: InstanceConfig, say: Say) -> Restored | None:
    """Copy everything under the checkpoint URI into the local checkpoint directory,
    keeping relative paths. None when the job keeps no checkpoints."""
    uri = config.spec.checkpoint_s3_uri
    if not uri:
        return None
    target = config.paths.checkpoints
    started = time.monotonic()
    try:
        objects = _stored_objects(uri)
        if objects:
            _fetch_into(uri, target, config.paths.base, say)
    except storage.StorageError as exc:
        raise storage.StorageError(f"restoring checkpoints: {exc}") from exc
    except OSError as exc:
        raise storage.StorageError(
            f"restoring checkpoints from {uri} into {target}: {exc.strerror or exc}"
        ) from exc
    restored = Restored(len(objects), sum(size for _, size in objects), time.monotonic() - started)
    if not objects:
        say(f"No checkpoints under {uri} yet: starting fresh")
    else:
        say(
            f"Restored {restored.files} checkpoint file(s), {_human(restored.bytes)}, "
            f"from {uri} into {target} in {restored.seconds:.1f} s"
        )
    return restored


def _fetch_into(uri: str, target: Path, scratch_dir: Path, say: Say) -> None:
    """What is stored under ``uri``, fetched into a directory of the runtime's own, then
    each file moved to its place below ``target`` (the job's): a file replaces whatever the
    job left at its name, and a link on the way (a directory of the job's swapped for a
    link to elsewhere) refuses the restore instead of being followed."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".checkpoint-restore-", dir=scratch_dir) as staging:
        storage.fetch(uri, Path(staging))
        for entry in untrusted.walk(Path(staging)):
            mode = entry.stat.st_mode
            if stat.S_ISDIR(mode):
                with untrusted.directory(target, entry.relative, create=True):
                    pass
            elif stat.S_ISREG(mode):
                untrusted.place(Path(staging, entry.relative), target, entry.relative)
            else:  # a link in a store of files: no checkpoint the sync stored
                say(f"Checkpoint {entry.relative} not restored: it is {untrusted.kind(mode)}")


def _stored_objects(uri: str) -> list[tuple[str, int]]:
    # A checkpoint directory that does not exist yet is a first attempt, not an error.
    if storage.scheme(uri) == "file" and not storage.exists(uri):
        return []
    return storage.list_objects(uri)


def start_sync(config: InstanceConfig, say: Say) -> CheckpointSync | None:
    """The running sync of the job's checkpoint directory; None when it keeps none. A
    StorageError naming the directory if it cannot be watched."""
    uri = config.spec.checkpoint_s3_uri
    if not uri:
        return None
    sync = CheckpointSync(config.paths.checkpoints, uri, say, scratch_dir=config.paths.base)
    try:
        return sync.start()
    except OSError as exc:
        raise storage.StorageError(
            f"storing checkpoints from {config.paths.checkpoints} at {uri}: {exc.strerror or exc}"
        ) from exc


# -- storing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Upload:
    relative: str
    uri: str
    size: int
    # Seconds from the file being complete (its ctime: the last write, or the rename that
    # put it in place) to the object being stored.
    lag: float
    final: bool  # stored by the final sync, after the script ended


class CheckpointSync:
    """Uploads the checkpoint directory ``root`` to ``uri`` while the script runs.

    ``start()`` before the script starts, ``stop()`` after it ends: stop waits for the
    upload under way, then stores everything that differs from what was last stored.
    Uploads run on one thread, in the order the files became complete; a failed one is
    retried after each of ``retry_delays`` and then logged (its URI kept in ``failed``),
    never raised.
    """

    def __init__(
        self,
        root: Path,
        uri: str,
        say: Say,
        *,
        watcher: Watcher | None = None,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        scratch_dir: Path | None = None,
        what: str = "checkpoint",
        shown: Path | None = None,
    ) -> None:
        self.root = root
        # What the files are, in the sync's words ("checkpoint"), and where the job knows
        # the directory (``root`` may be a descriptor's path, /proc/self/fd/N).
        self.what = what
        self.What = what[:1].upper() + what[1:]
        self.shown = shown or root
        self.uri = uri
        self.say = say
        self.retry_delays = tuple(retry_delays)
        self.scratch_dir = scratch_dir
        self.uploads: list[Upload] = []
        self.failed: list[str] = []  # URIs that could not be stored, last attempt failed
        self._watcher = watcher
        self._stored: dict[str, StatKey] = {}
        # What the sync said it passes over (a link, a FIFO), so that it says so once.
        self._passed_over: set[str] = set()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._scratch: Path | None = None

    @property
    def lags(self) -> list[float]:
        return [upload.lag for upload in self.uploads]

    def start(self) -> CheckpointSync:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.scratch_dir is not None:
            self.scratch_dir.mkdir(parents=True, exist_ok=True)
        self._scratch = Path(tempfile.mkdtemp(prefix=".checkpoint-staging-", dir=self.scratch_dir))
        # What is there already (the restored checkpoint) is what the store holds.
        self._stored = {self._relative(path): key for path, key in scan(self.root).items()}
        if self._watcher is None:
            self._watcher = default_watcher(self.root)
        self.say(
            f"Uploading {self.what}s from {self.shown} to {self.uri} as they are written "
            f"({self._watcher.description})"
        )
        self._thread = threading.Thread(target=self._run, name="checkpoint-sync", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop watching, store what is left; returns how many files the final sync
        stored. Safe to call again, and never raises for a file it could not store."""
        thread, self._thread = self._thread, None
        if thread is None or self._watcher is None or self._scratch is None:
            return 0
        self._stopping.set()
        thread.join()
        started = time.monotonic()
        pending = self._drain_watcher()
        with contextlib.suppress(Exception):  # a watcher already broken: the scan will do
            self._watcher.close()
        failed_before = len(self.failed)
        final = [
            upload
            for path in self._unstored(pending)
            if (upload := self._store_one(path, None, final=True)) is not None
        ]
        shutil.rmtree(self._scratch, ignore_errors=True)
        failed = len(self.failed) - failed_before
        self.say(
            f"Final {self.what} sync stored {len(final)} file(s), "
            f"{_human(sum(upload.size for upload in final))}, in "
            f"{time.monotonic() - started:.1f} s"
            + (f"; {failed} could not be stored" if failed else "")
        )
        lags = [upload.lag for upload in self.uploads if not upload.final]
        if lags:
            self.say(
                f"{self.What} uploads while training: {len(lags)}, seconds from written to "
                f"stored: median {statistics.median(lags):.2f}, max {max(lags):.2f}"
            )
        return len(final)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._upload_batch()
                except Exception as exc:
                    # inotify gone (the directory removed and made again, no watches left,
                    # a new directory it may not read): polling needs none of it.
                    if isinstance(self._watcher, PollingWatcher):
                        raise
                    self._fall_back(exc)
        except Exception as exc:  # a bug must not end the uploads silently
            self.say(
                f"{self.What} uploads stopped: {exc!r}; what is left is stored after the script"
            )

    def _upload_batch(self) -> None:
        assert self._watcher is not None  # set by start()
        for ready in self._watcher.changes(WAKE_INTERVAL):
            if self._stopping.is_set():
                return  # the final sync stores the rest
            if ready.settled and self._stored.get(self._relative(ready.path)) == stat_key(
                ready.path
            ):
                continue  # stored as it is already
            self._store_one(ready.path, ready, final=False)

    def _fall_back(self, exc: Exception) -> None:
        assert self._watcher is not None
        with contextlib.suppress(Exception):
            self._watcher.close()
        # Whatever is not stored as it is now, the polls announce once it holds still:
        # files completed while inotify was failing must not wait for the final sync.
        stored = {self.root / relative: key for relative, key in self._stored.items()}
        self._watcher = PollingWatcher(
            self.root, reason=f"inotify stopped working: {exc}", announced=stored
        )
        self.say(f"{self.What} uploads go on by {self._watcher.description}")

    def _drain_watcher(self) -> list[Path]:
        assert self._watcher is not None
        try:
            return [ready.path for ready in self._watcher.changes(0)]
        except Exception:
            return []  # the scan in _unstored finds them all the same

    def _unstored(self, pending: list[Path]) -> list[Path]:
        """Files the watcher still had to hand, then those stat says were changed since
        they were last stored, or never were. Says what it passes over, not yet said."""
        files, others = survey(self.root)
        changed = [
            path for path, key in files.items() if self._stored.get(self._relative(path)) != key
        ]
        skipped = {
            relative: what
            for path, what in sorted(others.items())
            if (relative := self._relative(path)) not in self._passed_over
        }
        if skipped:
            named = [f"{relative} ({what})" for relative, what in skipped.items()]
            more = len(named) - NAMED_SKIPS
            self.say(
                f"Final {self.what} sync passed over what is not a regular file, never "
                "following nor reading it: "
                + ", ".join(named[:NAMED_SKIPS])
                + (f" and {more} more" if more > 0 else "")
            )
        return list(dict.fromkeys([*pending, *sorted(changed)]))

    def _pass_over(self, relative: str, why: str) -> None:
        if relative not in self._passed_over:
            self._passed_over.add(relative)
            self.say(f"{self.What} {relative} not stored: {why} (never followed nor read)")

    def _store_one(self, path: Path, ready: Ready | None, *, final: bool) -> Upload | None:
        """Store one file; whatever goes wrong is that file's failure, not the sync's."""
        relative = self._relative(path)
        uri = f"{self.uri.rstrip('/')}/{relative}"  # to name it, should join refuse it
        try:
            uri = storage.join(self.uri, relative)
            return self._store(path, relative, uri, ready, final=final)
        except Exception as exc:  # e.g. a name S3 cannot take (not UTF-8)
            self._failed(uri, f"{type(exc).__name__}: {exc}")
            return None

    def _store(
        self, path: Path, relative: str, uri: str, ready: Ready | None, *, final: bool
    ) -> Upload | None:
        assert self._scratch is not None  # set by start()
        assert self._watcher is not None
        if self._scratch in path.parents:
            return None  # our own staging copies, where scratch_dir is inside the tree
        with self._staging_file() as copy:
            try:
                key = copy_whole(path, copy, self.root)
            except NotFollowed as exc:
                self._pass_over(relative, str(exc))
                return None
            except NotWhole as exc:
                # Gone (a temporary name renamed away) or being written: its close or
                # rename brings it back while the script runs. After it, say why.
                if final and str(exc) != "gone":
                    self.say(f"{self.What} {relative} not stored: {exc}")
                return None
            except OSError as exc:
                self._failed(uri, f"cannot read {path}: {exc.strerror or exc}")
                return None
            # A write since the file was announced complete means it was being written
            # again: the copy may be of a later version. Its next close brings it back.
            if ready is not None and not self._watcher.unchanged(ready):
                return None
            if not self._put(copy, uri, relative, patient=final):
                return None
        upload = Upload(relative, uri, key[0], time.time() - key[2] / 1e9, final)
        self._stored[relative] = key
        self.uploads.append(upload)
        self.say(
            f"{self.What} {relative} stored at {uri} ({_human(upload.size)}, "
            f"{upload.lag:.2f} s after it was written)"
        )
        return upload

    @contextlib.contextmanager
    def _staging_file(self) -> Iterator[Path]:
        assert self._scratch is not None
        fd, name = tempfile.mkstemp(dir=self._scratch)
        os.close(fd)
        try:
            yield Path(name)
        finally:
            Path(name).unlink(missing_ok=True)

    def _put(self, copy: Path, uri: str, relative: str, *, patient: bool) -> bool:
        attempts = len(self.retry_delays) + 1
        for attempt, delay in enumerate([*self.retry_delays, None], start=1):
            try:
                storage.put_file(copy, uri)
                return True
            except (storage.StorageError, OSError) as exc:
                error = exc
            if delay is None:
                break
            self.say(
                f"Storing {self.what} {relative} at {uri} failed "
                f"(attempt {attempt} of {attempts}: {error}); retrying in {delay:g} s"
            )
            if patient:
                time.sleep(delay)
            elif self._stopping.wait(delay):
                return False  # stopping: the final sync tries again, patiently
        self._failed(uri, str(error))
        return False

    def _failed(self, uri: str, error: str) -> None:
        self.failed.append(uri)
        self.say(f"Could not store {self.what} at {uri}: {error}")

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


def _human(size: int) -> str:
    return f"{size} bytes" if size < 1_000_000 else f"{size / 1_000_000:.1f} MB"
