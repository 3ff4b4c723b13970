"""The local backend's image store: the catalog's images (``contract.images``), each built
once on this machine into a virtual environment that every instance naming it shares
read-only, as a node shares the container images it has pulled.

    <root>/<digest>/            the environment; ``runyard-image.json`` in it, written last,
                                says it is whole (the definition, pip's freeze, the times)
    <root>/<digest>.lock        held by the build while it runs, and (shared) by every
                                instance that runs on the image, so prune leaves it alone
    <root>/<digest>.log         the build's output, which waiting instances show
    <root>/<digest>.failed      why the last build failed (pip's own words)
    <root>/offers/              whether the package index has a framework's version for
                                an image's Python, as pip answered (package_index)

Images are content-addressed: a changed definition has another digest, so it is a new
image and the old one stays whole for the jobs that run on it. A build runs in a process
of its own (``python -m provisioning.local.image_build``) that outlives a worker restart,
started by the first launch that needs the image; other launches find its lock held and
their instances wait for it. Builds use the server's pip configuration (index, find-links,
constraints), never a job's.

A build installs the image's packages, checks that its framework imports (``verify``),
then tries each of its ``tried`` packages (torchvision): one is kept only where pip
installs it without changing what is there and it passes its check; otherwise what it
brought is removed again, and the image's record says why it went without.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from contract.image_recipes import TRIED_CHECKS
from contract.images import Image, StoredImage, image_record
from provisioning.local.package_index import PackageIndex

# What a failed build keeps of pip's output as its reason.
REASON_LINES = 12
BUILD_TIMEOUT = 3600.0
# How long a check of what was installed may take.
CHECK_TIMEOUT = 300.0
# An image's environment in the store: its digest.
_DIGEST = re.compile(r"[0-9a-f]{20}")


class ImageBuildError(Exception):
    """An image could not be built; the message is the reason, in pip's words."""


@dataclass(frozen=True)
class StoredState:
    digest: str
    state: str  # built | building | failed | absent
    size_bytes: int = 0
    built_at: str = ""
    reason: str = ""


# Builders this process started (a backend is built anew for each pass), polled so none
# lingers unreaped as a zombie.
_builders: list[subprocess.Popen[bytes]] = []
_builders_lock = threading.Lock()


class ImageStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def stored(self, image: Image) -> StoredImage:
        return StoredImage(self.root, image.digest)

    @property
    def index(self) -> PackageIndex:
        """The package index's answers, remembered beside the images."""
        return PackageIndex(self.root / "offers")

    # -- building ---------------------------------------------------------------------

    def ensure(self, image: Image) -> StoredImage:
        """The image's place; a build of it is started in the background unless it is
        whole or already being built (by this process or another)."""
        stored = self.stored(image)
        _reap()
        if stored.is_built():
            return stored
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(stored.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return stored  # being built, or in use (then it is whole)
            if stored.is_built():
                return stored
            stored.failure.unlink(missing_ok=True)  # a new try, its own result
            with open(stored.log, "wb") as log:
                # The lock travels with the builder (its copy of fd): released when it ends.
                builder = subprocess.Popen(
                    [sys.executable, "-m", "provisioning.local.image_build", str(self.root),
                     json.dumps(definition(image))],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(fd,),
                    start_new_session=True,
                )  # fmt: skip
            with _builders_lock:
                _builders.append(builder)
        finally:
            os.close(fd)
        return stored

    def build(self, image: Image, out: IO[str], *, wait: bool = True) -> StoredImage:
        """Build the image here, now, saying what pip does on ``out``; a build already
        running elsewhere is waited for (``wait``) instead. ImageBuildError on failure."""
        stored = self.stored(image)
        self.root.mkdir(parents=True, exist_ok=True)
        with open(stored.lock, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if stored.is_built():
                    return stored
                if not wait:
                    raise ImageBuildError(
                        f"{image.name} is being built by another process"
                    ) from None
                out.write(f"{image.name} is being built by another process: waiting\n")
                fcntl.flock(lock, fcntl.LOCK_EX)
            if stored.is_built():
                return stored
            try:
                build_locked(image, stored, out)
            except ImageBuildError as exc:
                stored.failure.write_text(str(exc) + "\n")
                raise
            stored.failure.unlink(missing_ok=True)
        return stored

    # -- what is here -----------------------------------------------------------------

    def state(self, image: Image) -> StoredState:
        stored = self.stored(image)
        if stored.is_built():
            record = json.loads(stored.marker.read_text())
            return StoredState(
                image.digest, "built", _size(stored.environment), str(record.get("built_at", ""))
            )
        if _held(stored.lock):
            return StoredState(image.digest, "building")
        if stored.failure.is_file():
            return StoredState(image.digest, "failed", reason=stored.failure.read_text().strip())
        return StoredState(image.digest, "absent")

    def digests(self) -> list[str]:
        """Every image environment in the store, whole or not."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and _DIGEST.fullmatch(p.name)
        )

    def records(self) -> list[dict[str, object]]:
        """What each whole image's marker says of it (its name, definition and build)."""
        found = []
        for digest in self.digests():
            stored = StoredImage(self.root, digest)
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(stored.marker.read_text()))
        return found

    def prune(self, keep: set[str], say: Callable[[str], None]) -> list[str]:
        """Remove every image not in ``keep`` that no instance runs on now (and what failed
        builds left); returns the digests removed."""
        removed = []
        names = set(self.digests())
        names |= {p.name.split(".")[0] for p in self.root.glob("*.failed")}
        for digest in sorted(names - keep):
            stored = StoredImage(self.root, digest)
            with _exclusive(stored.lock) as free:
                if not free:
                    say(f"{digest}: in use or being built, kept")
                    continue
                _make_writable(stored.environment)
                shutil.rmtree(stored.environment, ignore_errors=True)
                for path in (stored.log, stored.failure):
                    path.unlink(missing_ok=True)
            stored.lock.unlink(missing_ok=True)
            removed.append(digest)
            say(f"{digest}: removed")
        return removed


def _reap() -> None:
    with _builders_lock:
        _builders[:] = [builder for builder in _builders if builder.poll() is None]


def definition(image: Image) -> dict[str, object]:
    """An image as the builder process takes it (and ``from_definition`` reads it)."""
    return {
        "framework": image.framework,
        "framework_version": image.framework_version,
        "python": image.python,
        "packages": list(image.packages),
        "processor": image.processor,
        "tried": list(image.tried),
        "verify": image.verify,
    }


def from_definition(data: dict[str, object]) -> Image:
    packages, tried = data["packages"], data.get("tried", [])
    # Both written by definition().
    assert isinstance(packages, list)
    assert isinstance(tried, list)
    return Image(
        framework=str(data["framework"]),
        framework_version=str(data["framework_version"]),
        python=str(data["python"]),
        packages=tuple(str(package) for package in packages),
        processor=str(data.get("processor", "cpu")),
        tried=tuple(str(package) for package in tried),
        verify=str(data.get("verify", "")),
    )


def interpreter_for(version: str) -> str:
    """A Python of ``version`` ("3.11") on this machine to build an image with: the one the
    server runs on, else ``python3.X`` on the PATH."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return str(getattr(sys, "_base_executable", sys.executable))
    found = shutil.which(f"python{version}")
    if found is None:
        raise ImageBuildError(
            f"no Python {version} on this machine to build the image with: install one "
            f"as python{version} on the worker's PATH"
        )
    return found


def build_locked(image: Image, stored: StoredImage, out: IO[str]) -> None:
    """Make the environment from nothing (the caller holds the image's lock)."""
    started = time.monotonic()
    environment = stored.environment
    if environment.exists():
        _make_writable(environment)
        shutil.rmtree(environment)  # an interrupted build's
    python = interpreter_for(image.python)
    out.write(f"Building {image.name} ({image.digest}) with {python}\n")
    out.flush()
    _run([python, "-m", "venv", str(environment)], out)
    pip = [str(stored.python), "-m", "pip"]
    out.write(f"Installing {' '.join(image.packages)}\n")
    out.flush()
    _run([*pip, "install", "--progress-bar", "off", *image.packages], out)
    if image.verify:
        out.write(f"Checking that {image.framework} imports\n")
        out.flush()
        failed = _check(stored.python, image.verify)
        if failed:
            raise ImageBuildError(f"{image.framework} does not import in the image: {failed}")
    left_out = {package: why for package in image.tried if (why := _try(stored, package, out))}
    frozen = subprocess.run(
        [*pip, "freeze", "--all"], capture_output=True, text=True, check=False
    ).stdout.split()
    seconds = round(time.monotonic() - started, 1)
    built_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    extra = {
        "built_at": built_at,
        "build_seconds": seconds,
        "freeze": frozen,
        "left_out": left_out,
    }
    # Read-only from now on: the image is shared, and what a job installs has a layer of
    # its own (runtime.instance.layers). The marker last, so whoever sees it sees it all.
    _make_read_only(environment, but_root=True)
    stored.marker.write_text(image_record(image, extra))
    _make_read_only(environment)
    out.write(f"Built {image.name} in {seconds:.0f} s\n")
    out.flush()


def _try(stored: StoredImage, package: str, out: IO[str]) -> str:
    """Install ``package`` if it fits what is there and works: "" once it is kept, else why
    the image goes without it (and whatever it brought is removed again)."""
    pip = [str(stored.python), "-m", "pip"]
    before = _installed(stored)
    # What is there stays as it is: a package that needs another torch does not fit.
    pins = stored.root / f"{stored.digest}.pins"
    pins.write_text("".join(f"{name}=={version}\n" for name, version in before.items()))
    out.write(f"Trying {package}, beside what is installed\n")
    out.flush()
    try:
        _run([*pip, "install", "--progress-bar", "off", "--constraint", str(pins), package], out)
    except ImageBuildError as exc:
        why = f"no build of it fits what the image holds ({exc})"
    else:
        check = TRIED_CHECKS.get(package, f"import {package.replace('-', '_')}")
        failed = _check(stored.python, check)
        why = f"the build pip found does not work beside the image's: {failed}" if failed else ""
    finally:
        pins.unlink(missing_ok=True)
    if why:
        added = sorted(set(_installed(stored)) - set(before))
        if added:
            _run([*pip, "uninstall", "--yes", *added], out)
        out.write(f"The image goes without {package}: {why}\n")
    else:
        out.write(f"Kept {package}\n")
    out.flush()
    return why


def _installed(stored: StoredImage) -> dict[str, str]:
    """Each distribution in the environment, by name, with its version."""
    listed = subprocess.run(
        [str(stored.python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {entry["name"]: entry["version"] for entry in json.loads(listed)}


def _check(python: Path, code: str) -> str:
    """Run ``code`` in the image: "" if it worked, else the last line it printed."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    try:
        done = subprocess.run(
            [str(python), "-c", code],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
            cwd="/",
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"it took over {CHECK_TIMEOUT:.0f} s"
    if done.returncode == 0:
        return ""
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def _run(argv: list[str], out: IO[str]) -> None:
    """Run a build step, its output passed on; ImageBuildError with pip's error lines."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("VIRTUAL_ENV", None)  # the server's: pip must install where it is told
    tail: list[str] = []
    with subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None  # PIPE above
        for line in process.stdout:
            out.write(line)
            out.flush()
            tail = [*tail[-(REASON_LINES * 4) :], line.rstrip("\n")]
        try:
            code = process.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            raise ImageBuildError(f"{argv[0]} took over {BUILD_TIMEOUT:.0f} s") from None
    if code != 0:
        errors = [line for line in tail if "ERROR" in line or "error:" in line.lower()]
        reason = " | ".join((errors or tail)[-REASON_LINES:])
        raise ImageBuildError(reason or f"{' '.join(argv[:3])} exited with {code}")


def _held(lock: Path) -> bool:
    with _exclusive(lock) as free:
        return not free


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[bool]:
    """Whether ``lock`` could be taken now (no build, no instance holds it); held while
    the block runs."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _make_read_only(root: Path, *, but_root: bool = False) -> None:
    unwritable = ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    _chmod_tree(root, lambda mode: mode & unwritable, but_root=but_root)


def _make_writable(root: Path) -> None:
    _chmod_tree(root, lambda mode: mode | stat.S_IWUSR)


def _chmod_tree(root: Path, change: Callable[[int], int], *, but_root: bool = False) -> None:
    if not root.exists():
        return
    # Bottom up: a directory made read-only first could refuse the changes below it.
    for directory, dirs, files in os.walk(root, topdown=False):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, change(os.lstat(path).st_mode))
    if not but_root:
        os.chmod(root, change(os.lstat(root).st_mode))


def _size(root: Path) -> int:
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total
