from __future__ import annotations

from pathlib import Path

from runtime.failure import reason

TRACEBACK = """\
some output
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    main()
  File "train.py", line 2, in main
    raise ValueError("learning rate must be positive")
ValueError: learning rate must be positive
""".splitlines()


def test_reason_is_the_exception_that_ended_the_script(tmp_path: Path) -> None:
    text = reason(1, TRACEBACK, tmp_path / "failure")
    assert text == "AlgorithmError: ValueError: learning rate must be positive, exit code: 1"


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
    assert text == "AlgorithmError: ValueError: learning rate must be positive, exit code: 1"
