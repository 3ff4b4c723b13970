"""The script runner as a real process: a script runs as it would started directly, its
exit status is recorded after its exit handlers, and a process that imported torch ends
without the interpreter's teardown, its files written out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runtime.launch.entry_point import RUNNER


def _run(
    tmp_path: Path, script: str, *args: str, name: str = "train.py", cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], str | None]:
    """Runs ``script``, written as ``code/<name>``, through the runner (from ``tmp_path``
    unless ``cwd`` says otherwise); its result and the exit record it left (None: none)."""
    code = tmp_path / "code"
    (code / name).parent.mkdir(parents=True, exist_ok=True)
    (code / name).write_text(script)
    record = tmp_path / "record"
    record.unlink(missing_ok=True)
    argv = [sys.executable, str(RUNNER), "--exit-record", str(record), *args]
    done = subprocess.run(argv, cwd=cwd or tmp_path, capture_output=True, text=True, timeout=120)
    return done, record.read_text() if record.exists() else None


def test_the_script_sees_what_it_would_see_started_directly(tmp_path: Path) -> None:
    script = (
        "import sys, json, os\n"
        "import helper\n"  # beside the script, as sys.path[0] finds it
        "print(json.dumps([sys.argv, sys.path[0], __name__, helper.NAME]))\n"
    )
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "helper.py").write_text("NAME = 'the job helper'\n")
    done, record = _run(tmp_path, script, str(tmp_path / "code" / "train.py"), "--epochs", "2")
    assert done.returncode == 0, done.stderr
    code = str(tmp_path / "code")
    assert done.stdout.strip() == (
        f'[["{code}/train.py", "--epochs", "2"], "{code}", "__main__", "the job helper"]'
    )
    assert record == "0\n"


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path: Path) -> None:
    script = "import sys\nprint(__name__, sys.argv, sys.path[0])\n"
    (tmp_path / "code" / "pkg").mkdir(parents=True)
    (tmp_path / "code" / "pkg" / "__init__.py").touch()
    code = tmp_path / "code"
    done, record = _run(
        tmp_path, script, "-m", "pkg.train", "--lr", "0.1", name="pkg/train.py", cwd=code
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"__main__ ['{code}/pkg/train.py', '--lr', '0.1'] {code}"
    assert record == "0\n"


def test_sys_exit_codes_are_the_interpreters(tmp_path: Path) -> None:
    for code, status, said in [("None", 0, ""), ("3", 3, ""), ("'no data'", 1, "no data\n")]:
        done, record = _run(tmp_path, f"import sys\nsys.exit({code})\n", "code/train.py")
        assert (done.returncode, record, done.stderr) == (status, f"{status}\n", said)


def test_an_uncaught_exception_is_reported_from_the_scripts_own_frames(tmp_path: Path) -> None:
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('handler saw', repr(sys.last_value)))\n"
        "def train():\n"
        "    raise ValueError('no data')\n"
        "train()\n"
    )
    done, record = _run(tmp_path, script, "code/train.py")
    assert done.returncode == 1
    assert record == "1\n"
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith('  File "code/train.py", line 5, in <module>'), done.stderr
    assert "run_script" not in done.stderr
    assert "runpy" not in done.stderr
    assert lines[-1] == "ValueError: no data"
    # Exit handlers see the exception, as after `python train.py`.
    assert done.stdout == "handler saw ValueError('no data')\n"


def test_the_record_is_written_after_the_scripts_exit_handlers(tmp_path: Path) -> None:
    record = tmp_path / "record"
    script = (
        "import atexit, os\n"
        f"atexit.register(lambda: print('recorded yet:', os.path.exists({str(record)!r})))\n"
    )
    done, written = _run(tmp_path, script, "code/train.py")
    assert (done.returncode, done.stdout, written) == (0, "recorded yet: False\n", "0\n")


def test_without_torch_the_interpreter_finalizes_as_usual(tmp_path: Path) -> None:
    script = "class Last:\n    def __del__(self):\n        print('finalized', flush=True)\n"
    done, _ = _run(tmp_path, script + "last = Last()\n", "code/train.py")
    assert done.stdout == "finalized\n"


def test_with_torch_the_process_ends_before_finalizing_with_its_files_written(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "metrics.txt"
    script = (
        "import torch\n"
        "class Last:\n    def __del__(self):\n        print('finalized', flush=True)\n"
        "last = Last()\n"
        f"log = open({str(kept)!r}, 'w')\n"  # never closed: left to the interpreter
        "log.write('accuracy 0.9')\n"
        "print('buffered', end='')\n"
    )
    done, record = _run(tmp_path, script, "code/train.py")
    assert (done.returncode, record) == (0, "0\n"), done.stderr
    assert done.stdout == "buffered"
    assert kept.read_text() == "accuracy 0.9"


def test_a_fork_that_runs_on_to_the_end_records_nothing(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "child = os.fork()\n"
        "if child:\n"
        "    os.waitpid(child, 0)\n"
        "    os._exit(0)\n"  # the script itself leaves no word
        "else:\n"
        "    sys.exit(5)\n"  # the child's exit, not the script's
    )
    done, record = _run(tmp_path, script, "code/train.py")
    assert (done.returncode, record) == (0, None)
