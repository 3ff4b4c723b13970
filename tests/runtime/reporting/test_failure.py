from __future__ import annotations

import re
from pathlib import Path

from runtime.reporting.failure import reason
from tests.instances import launch_request, start_runtime, write_instances

TRACEBACK = """\
some output
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    main()
  File "train.py", line 2, in main
    raise ValueError("learning rate must be positive")
ValueError: learning rate must be positive
""".splitlines()


# The reason of TRACEBACK: its exception first, then its frames.
TRACEBACK_REASON = "\n".join(
    [
        "AlgorithmError: ValueError: learning rate must be positive, exit code: 1",
        *TRACEBACK[1:-1],
    ]
)


def test_reason_is_the_exception_that_ended_the_script_then_its_frames(tmp_path: Path) -> None:
    text = reason(1, TRACEBACK, tmp_path / "failure")
    assert text == (
        "AlgorithmError: ValueError: learning rate must be positive, exit code: 1\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    main()\n"
        '  File "train.py", line 2, in main\n'
        '    raise ValueError("learning rate must be positive")'
    )
    assert text == TRACEBACK_REASON


def test_the_scripts_own_failure_file_wins(tmp_path: Path) -> None:
    (tmp_path / "failure").write_text("bad data in shard 3" + "!" * 2000)
    text = reason(1, TRACEBACK, tmp_path / "failure")
    assert text.startswith("bad data in shard 3")
    assert len(text) == 1024


def test_exit_137_is_reported_as_out_of_memory(tmp_path: Path) -> None:
    assert reason(137, [], tmp_path / "failure").startswith("OutOfMemory")


def test_without_a_traceback_the_last_lines_explain(tmp_path: Path) -> None:
    text = reason(
        2,
        ["usage: train.py [--epochs N]", "train.py: error: unrecognized arguments: --bogus"],
        tmp_path / "f",
    )
    assert "unrecognized arguments: --bogus" in text
    assert text.endswith("exit code: 2")
    assert "printed nothing" in reason(3, [], tmp_path / "f")


def test_death_by_signal_is_named(tmp_path: Path) -> None:
    text = reason(134, ["terminate called without an active exception"], tmp_path / "f")
    assert text == (
        "AlgorithmError: killed by SIGABRT: terminate called without an active exception, "
        "exit code: 134"
    )


def test_a_large_exit_code_is_not_mistaken_for_a_signal(tmp_path: Path) -> None:
    text = reason(213, ["no network interfaces"], tmp_path / "f")
    assert text == "AlgorithmError: no network interfaces, exit code: 213"


def test_the_exception_of_an_mpi_rank_is_found_through_its_tag(tmp_path: Path) -> None:
    tagged = [f"[1,1]<stderr>: {line}" for line in TRACEBACK] + [
        "--------------------------------------------------------------------------",
        "prterun detected that one or more processes exited with non-zero status",
    ]
    text = reason(1, tagged, tmp_path / "f")
    assert text == TRACEBACK_REASON


def test_ranks_that_fail_together_do_not_mix_their_frames(tmp_path: Path) -> None:
    other = [line.replace("train.py", "other.py") for line in TRACEBACK]
    interleaved = [
        line
        for pair in zip(TRACEBACK, other, strict=True)
        for line in (f"[1,1]<stderr>: {pair[0]}", f"[1,0]<stderr>: {pair[1]}")
    ]
    text = reason(1, interleaved, tmp_path / "f")
    # Rank 1 started its traceback first: its lines alone make the reason.
    assert text == TRACEBACK_REASON


def test_a_long_reason_keeps_the_exit_code(tmp_path: Path) -> None:
    long = [
        "Traceback (most recent call last):",
        '  File "train.py", line 1, in <module>',
        "ValueError: " + "x" * 3000,
    ]
    text = reason(1, long, tmp_path / "f")
    assert len(text) == 1024
    assert text.startswith("AlgorithmError: ValueError: xxx")
    assert text.endswith("…, exit code: 1")


def test_without_a_traceback_a_long_line_does_not_push_out_the_last(tmp_path: Path) -> None:
    text = reason(1, ["progress " * 400, "saving", "fatal: disk full"], tmp_path / "f")
    assert len(text) <= 1024
    assert text.endswith(" | saving | fatal: disk full, exit code: 1")


def test_a_traceback_whose_heading_left_the_tail_still_names_the_exception(
    tmp_path: Path,
) -> None:
    # Only the last lines of stderr are kept: a deep traceback's heading is gone by its end.
    frames = [f'  File "/lib/python3.11/site-packages/pkg/m{i}.py", line 9, in f' for i in range(5)]
    text = reason(1, [*frames, "    f()", "KeyError: 'lr'"], tmp_path / "f")
    assert text == "\n".join(["AlgorithmError: KeyError: 'lr', exit code: 1", *frames, "    f()"])


# A stack 40 frames deep through a library's modules (each frame's path is long, as under
# site-packages), ending in the exception that explains the failure.
DEEP_LIBRARY = """
import pathlib, sys
library = pathlib.Path("lib/python3.11/site-packages/deep_library_with_a_long_name")
library.mkdir(parents=True)
for i in range(40):
    call = f"import frame_{i + 1}; frame_{i + 1}.call()" if i < 39 else (
        "raise ValueError('shapes (3, 4) and (5, 6) cannot be multiplied')")
    (library / f"frame_{i}.py").write_text(f"def call():\\n    {call}\\n")
sys.path.insert(0, str(library))
import frame_0
"""


def _run_failing(tmp_path: Path, script: str) -> tuple[Path, str]:
    """The runtime as a real process on ``script``; its base dir and what it printed."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    base = write_instances(tmp_path / "job", launch_request(source))["algo-1"]
    process = start_runtime(base)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    return base, output


def test_a_deep_traceback_keeps_its_exception_and_innermost_frames(tmp_path: Path) -> None:
    base, _output = _run_failing(tmp_path, DEEP_LIBRARY + "frame_0.call()\n")
    text = (base / "output" / "failure").read_text()
    assert len(text) <= 1024, text
    first, heading, left_out, *kept = text.splitlines()
    assert first == (
        "AlgorithmError: ValueError: shapes (3, 4) and (5, 6) cannot be multiplied, exit code: 1"
    )
    assert heading == "Traceback (most recent call last):"
    # Whole frames, location then code, ending with the innermost, nothing cut mid-word.
    assert "…" not in text
    innermost = [
        int(re.fullmatch(r'  File ".*/frame_(\d+)\.py", line 2, in call', line)[1])  # type: ignore[index]
        for line in kept[::2]
    ]
    assert innermost == list(range(40 - len(innermost), 40)), text
    assert len(innermost) >= 3, text
    assert kept[-1] == "    raise ValueError('shapes (3, 4) and (5, 6) cannot be multiplied')"
    assert all(line.startswith("    import frame_") for line in kept[1:-1:2]), text
    # The frames left out are the outermost: the script's own and the library's first.
    assert left_out == f"[{41 - len(innermost)} frames left out]", text
    assert "train.py" not in text


def test_a_cause_carried_in_an_exceptions_message_keeps_its_end(tmp_path: Path) -> None:
    # As torch's DataLoader re-raises a worker's exception: the worker's whole traceback is
    # the message, and its last line is the cause.
    script = DEEP_LIBRARY + (
        "import traceback\n"
        "try:\n"
        "    frame_0.call()\n"
        "except ValueError:\n"
        "    carried = traceback.format_exc()\n"
        "raise RuntimeError(\n"
        "    f'Caught ValueError in DataLoader worker process 0.\\nOriginal {carried}')\n"
    )
    base, _output = _run_failing(tmp_path, script)
    text = (base / "output" / "failure").read_text()
    assert len(text) <= 1024, text
    assert text.startswith(
        "AlgorithmError: RuntimeError: Caught ValueError in DataLoader worker process 0.\n"
    ), text
    assert text.endswith(
        'frame_39.py", line 2, in call\n'
        "    raise ValueError('shapes (3, 4) and (5, 6) cannot be multiplied')\n"
        "ValueError: shapes (3, 4) and (5, 6) cannot be multiplied, exit code: 1"
    ), text
    assert "lines left out]" in text


def test_a_long_failure_file_keeps_the_exception_at_its_end(tmp_path: Path) -> None:
    # SageMaker's examples write the whole traceback to output/failure.
    script = DEEP_LIBRARY + (
        "import os, traceback\n"
        "try:\n"
        "    frame_0.call()\n"
        "except ValueError:\n"
        "    failure = os.path.join(os.environ['SM_OUTPUT_DIR'], 'failure')\n"
        "    pathlib.Path(failure).write_text(traceback.format_exc())\n"
        "    sys.exit(1)\n"
    )
    _base, output = _run_failing(tmp_path, script)
    text = output.partition("[runtime] Failed: ")[2].rstrip("\n")
    assert len(text) <= 1024, output
    assert text.startswith("Traceback (most recent call last):\n["), text
    assert text.endswith(
        "    raise ValueError('shapes (3, 4) and (5, 6) cannot be multiplied')\n"
        "ValueError: shapes (3, 4) and (5, 6) cannot be multiplied"
    ), text


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    base, _output = _run_failing(tmp_path, "epochs = 3\nfor epoch in range(epochs)\n    pass\n")
    train = base / "code" / "train.py"
    assert (base / "output" / "failure").read_text() == (
        f"AlgorithmError: SyntaxError: expected ':' ({train}, line 2), exit code: 1\n"
        f'  File "{train}", line 2\n'
        "    for epoch in range(epochs)"
    )


def test_a_syntax_error_in_an_imported_module_names_that_module(tmp_path: Path) -> None:
    script = "import pathlib\npathlib.Path('model.py').write_text('def f(:\\n')\nimport model\n"
    base, _output = _run_failing(tmp_path, script)
    model = base / "code" / "model.py"
    assert (base / "output" / "failure").read_text() == (
        f"AlgorithmError: SyntaxError: invalid syntax ({model}, line 1), exit code: 1\n"
        "Traceback (most recent call last):\n"
        f'  File "{base / "code" / "train.py"}", line 3, in <module>\n'
        "    import model\n"
        f'  File "{model}", line 1\n'
        "    def f(:"
    )
