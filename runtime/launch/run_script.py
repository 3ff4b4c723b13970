"""Runs a job's Python entry point as ``python SCRIPT`` (or ``python -m MODULE``) would, and
ends its process once the script and its exit handlers are done.

    python run_script.py [--exit-record PATH] SCRIPT [ARGS...]
    python run_script.py [--exit-record PATH] -m MODULE [ARGS...]

It runs by its path, with nothing but the standard library: in the job's interpreter,
whatever its version, and without a package of Runyard's on the script's ``sys.path``
(``runtime`` or ``contract`` there would hide the job's own modules of those names). The
script sees what it would see started directly: its ``sys.argv``, its directory first on
``sys.path`` (the working directory for ``-m``), ``__name__ == "__main__"``, an uncaught
exception's traceback from its own first frame, and ``sys.last_value`` set for its exit
handlers. Two things differ, both after the script's last line and its exit handlers:

- With ``--exit-record``, the exit status it ended with (0, its ``sys.exit`` code, 1 for
  an uncaught exception) is written to PATH. The runtime then knows that a process which
  dies by a signal after that point had finished its script (``runtime.launch.workers``).
- A process that imported torch ends there, without tearing the interpreter down, as
  multiprocessing's forked children end. torch's threads outlive the script: gloo's
  workers and its transport's loop, the TCPStore daemon, autograd's device threads. The
  process group a script destroys lives on while its DDP model (or anything else) holds it,
  so they are there when the interpreter finalizes. One that takes the GIL then (a future's
  callback, the release of a tensor Python had handed over) is ended by CPython with
  pthread_exit, whose unwinding C++ turns into std::terminate: "terminate called without
  an active exception", SIGABRT, and a job that trained fully fails
  (pytorch/pytorch#38228; #190489 for gloo's process groups at exit). What finalization
  still does for the script is done first: its open files are flushed, C's too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import sys
from types import TracebackType

RECORD_OPTION = "--exit-record"
USAGE = f"usage: python run_script.py [{RECORD_OPTION} PATH] (SCRIPT | -m MODULE) [ARGS...]"
# Exit status of a script ended by Ctrl-C (KeyboardInterrupt), as a shell shows it.
INTERRUPTED = 130
# Frames above the script's own in a traceback: this runner's and runpy's (frozen from
# 3.11 on, and then named so).
_LAUNCH_FILES = {__file__, runpy.__file__, "<frozen runpy>"}


class _Ending:
    """What happens once the script and its exit handlers are done: registered before the
    script runs, so that it is the last exit handler to run."""

    def __init__(self, record: str | None) -> None:
        self.record = record
        self.pid = os.getpid()
        # Until the script has run: this runner failed before it could.
        self.status = 1

    def __call__(self) -> None:
        if os.getpid() != self.pid:
            return  # a fork of the script's that ran on to the end is not the script
        if self.record is not None:
            _write_record(self.record, self.status)
        if "torch" in sys.modules:
            _flush_all()
            os._exit(self.status)


def main(argv: list[str]) -> None:
    record = None
    if argv[:1] == [RECORD_OPTION] and len(argv) >= 2:
        record, argv = argv[1], argv[2:]
    if not argv or argv == ["-m"]:
        sys.exit(USAGE)
    ending = _Ending(record)
    atexit.register(ending)
    ending.status = _run(argv)
    sys.exit(ending.status)


def _run(argv: list[str]) -> int:
    """The exit status the script ends with, once it has run."""
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        return _exit_status(exc.code)
    except BaseException as exc:  # as the interpreter treats an uncaught one
        _report_uncaught(exc)
        return INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1
    return 0


def _exit_status(code: object) -> int:
    """What the process exits with for ``sys.exit(code)``, as the interpreter has it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _report_uncaught(exc: BaseException) -> None:
    """As the interpreter reports an exception that ends a script: through
    ``sys.excepthook`` (the script may have set its own), with ``sys.last_*`` set."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _LAUNCH_FILES:
        tb = tb.tb_next
    exc = exc.with_traceback(tb)
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    sys.excepthook(type(exc), exc, tb)


def _write_record(path: str, status: int) -> None:
    """Written whole or not at all; without it the exit status alone decides."""
    partial = f"{path}.partial"
    try:
        with open(partial, "w") as record:
            record.write(f"{status}\n")
        os.replace(partial, path)
    except OSError as exc:
        print(f"runyard: could not record the script's exit: {exc}", file=sys.stderr)


def _flush_all() -> None:
    """What the interpreter's finalization would write out: every open Python file
    (one a script never closed is flushed as it is collected there) and C's streams."""
    import _io
    import ctypes
    import gc

    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    # By type alone: isinstance would ask each object for its __class__, which some
    # answer with a warning (torch's deprecated aliases).
    file_base: type = _io._IOBase
    for found in gc.get_objects():
        if issubclass(type(found), file_base):
            _flush(found)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def _flush(stream: object) -> None:
    # Closed, or not writable: nothing to write out.
    with contextlib.suppress(Exception):
        stream.flush()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1:])
