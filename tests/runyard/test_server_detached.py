"""`runyard server --detach`, `status` and `stop`: a real server in the background, found,
refused a twin, and stopped with everything it started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runyard.client import is_up
from tests.runyard.test_server_startup import REPO, _environment, _free_port


def _runyard(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args],
        env=_environment(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie: those wait for init to reap them) processes of a group."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def test_a_detached_server_answers_is_found_and_stops_with_all_it_started(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    assert _runyard(home, "server", "status").returncode == 3

    started = _runyard(home, "server", "--detach", "--port", str(port))
    try:
        assert started.returncode == 0, started.stderr
        line = started.stdout.strip()
        assert line.startswith(f"Runyard is ready at {url} (pid ")
        assert line.endswith(f"log: {home / 'server.log'})")
        pid = int(line.split("(pid ")[1].split(";")[0])
        # The command has returned; the server answers, in a session of its own.
        assert is_up(url)
        assert os.getpgid(pid) == pid

        status = _runyard(home, "server", "status")
        assert (status.returncode, status.stdout) == (
            0,
            f"running at {url} (pid {pid}); log: {home / 'server.log'}\n",
        )
        twin = _runyard(home, "server", "--detach", "--port", str(_free_port()))
        assert twin.returncode == 1
        assert twin.stderr == f"error: a Runyard server is already running on {home} at {url}\n"
    finally:
        stopped = _runyard(home, "server", "stop")
    assert stopped.stdout == f"stopped the server at {url} (pid {pid})\n", stopped.stderr
    # Its worker and beat went with it; the log holds what it printed.
    assert _group_members(pid) == []
    assert not is_up(url)
    assert "Runyard is ready" in (home / "server.log").read_text()
    again = _runyard(home, "server", "status")
    assert (again.returncode, again.stdout) == (3, f"no Runyard server is running on {home}\n")
    assert _runyard(home, "server", "stop").stdout == f"no Runyard server is running on {home}\n"


def test_a_detached_server_that_cannot_start_says_why_from_its_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "runyard", "server", "--detach", "--port", str(_free_port())],
        env={
            **_environment(home),
            "RUNYARD_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 1
    assert f"error: the server did not start; the end of {home / 'server.log'}:" in result.stderr
    assert "Connection refused" in result.stderr or "connection" in result.stderr.lower()
    assert _runyard(home, "server", "status").returncode == 3


@pytest.mark.parametrize("command", [["server", "--help"], ["server", "stop", "--help"]])
def test_the_server_commands_have_help(tmp_path: Path, command: list[str]) -> None:
    result = _runyard(tmp_path, *command)
    assert result.returncode == 0
    assert "Usage:" in result.stdout
