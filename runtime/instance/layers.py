"""The job's environment: layers above its image, as a container's writable layer sits
above its image's.

    image           read-only, shared by every job that names it
      job layer     the code's requirements.txt (and the code, when it is a package),
                    installed once per job on each machine, by the first of its instances
                    there to take the layer's lock; the others wait and use it
        instance    what the job's processes run with: what they install while they run
                    lands here, apart from the other instances' installs

Each layer is a virtual environment whose site directory names the one below in a ``.pth``
file (Python's own way to add a site directory), so what is below counts as installed and
is imported from where it lies. pip changes only the environment it runs in
(``sys.prefix``): asked for another version of a package below, it installs that version
in the layer, which comes first on ``sys.path``, and leaves the one below alone. So nothing
a job installs reaches its image, the server or another job.

A layer's virtual environment is written here, not made by the ``venv`` module: ``venv``
makes one only for the interpreter that runs it, and starting the image's interpreter for
each layer cost an instance a tenth of a second more. PEP 405's layout is three things: a
``pyvenv.cfg`` naming the base interpreter, links to it in ``bin/``, and a site directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from contract import variables
from runtime.instance import install

# Written last into a layer whose installs all succeeded.
MARKER = ".runyard-layer.json"
PTH_FILE = "_runyard_layers.pth"
# Asked of an image's interpreter: where its packages and scripts are, and the interpreter
# a layer above it is a link to. (With its site: that is what finds its virtual
# environment, which sets sys.prefix.)
_PROBE = """\
import json, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({
    "prefix": sys.prefix,
    "sites": list(dict.fromkeys([paths["purelib"], paths["platlib"]])),
    "scripts": paths["scripts"],
    "base": getattr(sys, "_base_executable", sys.executable),
    "version": "%d.%d.%d" % sys.version_info[:3],
}))
"""
# A script's interpreter line as pip writes it, plain or (for a long path) through sh.
_SHEBANG = re.compile(rb"#!(?P<plain>/\S+)\n|#!/bin/sh\n'''exec' (?P<sh>/\S+) ")
LOCK_POLL_SECONDS = 0.2


class LayerError(Exception):
    """A layer could not be made (its interpreter would not start, say)."""


@dataclass(frozen=True)
class PythonEnvironment:
    """An interpreter with its packages: the image's, or a layer's above it."""

    python: str
    prefix: str
    # Its own site directories, then those of the layers below, in import order.
    search: tuple[str, ...]
    # Its own scripts' directory, then those below: what PATH starts with.
    bin_dirs: tuple[str, ...]
    # The interpreter installation every layer's python links to, and its version (X.Y.Z).
    base: str
    version: str

    @property
    def short_version(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def path(self, inherited: str | None) -> str:
        return os.pathsep.join([*self.bin_dirs, *filter(None, [inherited])])

    @classmethod
    def current(cls) -> PythonEnvironment:
        """The environment this process runs in (the runtime's own)."""
        paths = sysconfig.get_paths()
        # Its site directories, with those its .pth files add (an environment above
        # another, as the suite's TensorFlow one is), in import order.
        sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        return cls(
            python=sys.executable,
            prefix=sys.prefix,
            search=tuple(dict.fromkeys([paths["purelib"], paths["platlib"], *sites])),
            bin_dirs=(paths["scripts"],),
            base=getattr(sys, "_base_executable", sys.executable),
            version=".".join(map(str, sys.version_info[:3])),
        )


def image(python: str) -> PythonEnvironment:
    """The image's environment: this process's own when the runtime runs on it, else as
    its interpreter tells it."""
    if python == sys.executable:
        return PythonEnvironment.current()
    try:
        result = subprocess.run(
            [python, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise LayerError(f"the image's interpreter {python} could not start: {exc}") from exc
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise LayerError(f"the image's interpreter {python} failed: {tail}")
    probed: _Probed = json.loads(result.stdout)
    return PythonEnvironment(
        python=python,
        prefix=probed["prefix"],
        search=tuple(probed["sites"]),
        bin_dirs=(probed["scripts"],),
        base=probed["base"],
        version=probed["version"],
    )


def job_layer(
    target: Path,
    below: PythonEnvironment,
    code_dir: Path,
    env: Mapping[str, str],
    say: Callable[[str], None],
    *,
    offered: Sequence[Path] = (),
    should_stop: Callable[[], bool] = lambda: False,
    installer: Installer | None = None,
) -> PythonEnvironment:
    """The job's layer at ``target``, made by whichever instance takes its lock first (the
    others wait for it, and fail as it failed). ``offered``: package directories to make
    importable there too (Runyard's own, for an image that does not hold them).
    ``installer``: who installs into it, when not the runtime itself."""
    failure = target.with_name(target.name + ".failed")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.with_name(target.name + ".lock"), should_stop):
        if failure.is_file():
            raise install.InstallError(failure.read_text())
        if (target / MARKER).is_file():
            made = json.loads((target / MARKER).read_text())
            if made.get("installed"):
                say(f"The job's packages were installed by {made.get('by', 'another instance')}")
            return _layer(target, below)
        shutil.rmtree(target, ignore_errors=True)  # an interrupted attempt's
        links = target / "offered"
        layer = make(target, below, extra_paths=[links] if offered else [])
        if offered:
            links.mkdir()
            for package in offered:
                (links / package.name).symlink_to(package, target_is_directory=True)
        pip_env = layer_environment(layer, env)
        if installer is not None:
            installer.own(target, installer.uid)
            # pip's cache is shared by every job on the machine: not this user's to write.
            pip_env.pop("PIP_CACHE_DIR", None)
            pip_env["PIP_NO_CACHE_DIR"] = "1"
        try:
            installed = install.install(
                # -I: pip's own modules, not a pip/ the job's code holds (the code
                # directory is pip's working directory).
                code_dir,
                [layer.python, "-I", "-m", "pip"],
                pip_env,
                say,
                installer.start if installer is not None else install.as_it_is,
            )
        except install.InstallError as exc:
            failure.write_text(str(exc))
            raise
        finally:
            if installer is not None:
                # Root's again, before root writes in it: the job's processes only read it.
                installer.own(target, 0)
        record = {"installed": installed, "by": env.get(variables.HOST, "")}
        (target / MARKER).write_text(json.dumps(record))
        return layer


@dataclass(frozen=True)
class Installer:
    """The job's user, installing into the job's layer: ``start`` starts pip confined as
    it, ``own`` hands a tree to a user (``runtime.instance.job_user.own_tree``)."""

    uid: int
    start: install.Starter
    own: Callable[[Path, int], None]


def instance_layer(target: Path, below: PythonEnvironment) -> PythonEnvironment:
    """The layer the job's processes run with on this instance."""
    layer = make(target, below)
    (target / MARKER).write_text("{}")
    return layer


def make(
    target: Path, below: PythonEnvironment, extra_paths: Sequence[Path] = ()
) -> PythonEnvironment:
    """A virtual environment at ``target`` above ``below``: its packages importable, its
    scripts run with the new interpreter."""
    layer = _layer(target, below)
    bin_dir, site = Path(layer.bin_dirs[0]), Path(layer.search[0])
    site.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    base = Path(below.base)
    (target / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
        f"version = {below.version}\nexecutable = {base}\n"
    )
    for name in ("python", "python3", f"python{below.short_version}"):
        (bin_dir / name).symlink_to(base)
    if not (target / "lib64").exists():
        (target / "lib64").symlink_to("lib")  # as venv makes it on 64-bit Linux
    lines = [f"import site; site.addsitedir({directory!r})" for directory in below.search]
    lines += [str(path) for path in extra_paths]
    (site / PTH_FILE).write_text("\n".join(lines) + "\n")
    _wrap_scripts(bin_dir, below.bin_dirs, Path(layer.python))
    return layer


def layer_environment(layer: PythonEnvironment, env: Mapping[str, str]) -> dict[str, str]:
    """The variables a process in ``layer`` runs with: ``env`` (never the instance's
    private ones) with the layer as the active virtual environment."""
    result = {k: v for k, v in env.items() if k not in variables.PRIVATE and k != "PYTHONHOME"}
    result["VIRTUAL_ENV"] = layer.prefix
    result["PATH"] = layer.path(env.get("PATH"))
    return result


def _layer(target: Path, below: PythonEnvironment) -> PythonEnvironment:
    return PythonEnvironment(
        python=str(target / "bin" / "python"),
        prefix=str(target),
        search=(str(target / "lib" / f"python{below.short_version}" / "site-packages"),
                *below.search),
        bin_dirs=(str(target / "bin"), *below.bin_dirs),
        base=below.base,
        version=below.version,
    )  # fmt: skip


class _Probed(TypedDict):
    prefix: str
    sites: list[str]
    scripts: str
    base: str
    version: str


def _wrap_scripts(bin_dir: Path, below: Sequence[str], python: Path) -> None:
    """Copies of the Python scripts below (``pip``, ``torchrun``, the toolkit's ``train``)
    that run with this layer's interpreter, so they see what is installed here too. The
    nearest layer's script of a name wins; other programs are found below on PATH."""
    for directory in below:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            target = bin_dir / entry.name
            if target.exists() or target.is_symlink() or not entry.is_file():
                continue
            text = _python_script(Path(entry.path), Path(directory))
            if text is None:
                continue
            target.write_bytes(b"#!" + os.fsencode(python) + b"\n" + text)
            target.chmod(0o755)


def _python_script(path: Path, directory: Path) -> bytes | None:
    """The body of a script that runs with an interpreter of ``directory``, without its
    interpreter line; None for any other file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
            if not head.startswith(b"#!"):
                return None
            match = _SHEBANG.match(head)
            if match is None:
                return None
            interpreter = Path(os.fsdecode(match["plain"] or match["sh"]))
            if interpreter.parent != directory:
                return None
            handle.seek(0)
            text = handle.read()
    except OSError:
        return None
    # The body starts after the interpreter line (after the sh trampoline's two lines).
    lines = text.split(b"\n", 3 if match["sh"] else 1)
    return lines[-1]


@contextlib.contextmanager
def _locked(path: Path, should_stop: Callable[[], bool]) -> Iterator[None]:
    """An exclusive flock on ``path``, waited for in short polls so a stop is heard."""
    with open(path, "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if should_stop():
                    raise install.InstallError("stopped while another instance installed") from None
                time.sleep(LOCK_POLL_SECONDS)
        yield
