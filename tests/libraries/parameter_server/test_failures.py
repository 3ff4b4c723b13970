"""A lost worker must fail the job in bounded time, never leave servers waiting forever."""

from __future__ import annotations

from pathlib import Path

from tests.libraries.parameter_server.cluster import by_role, describe, run_cluster
from tests.libraries.parameter_server.test_training import SCENARIO


def test_a_worker_that_crashes_makes_the_servers_fail_after_the_worker_timeout(
    tmp_path: Path,
) -> None:
    # Sync mode: worker 0 is left waiting on a step that worker 1 will never push.
    finished = run_cluster(
        tmp_path / "logs",
        [
            *(SCENARIO, "--output", str(tmp_path), "--mode", "sync", "--steps", "50"),
            *("--crash-worker", "1", "--crash-after", "3"),
        ],
        server_args=["--worker-timeout", "3"],
    )
    servers, workers = by_role(finished, "server"), by_role(finished, "worker")
    assert [p.exit_code for p in servers] == [1, 1], describe(finished)
    for server in servers:
        assert "worker 1 sent nothing for 3 s" in server.output, describe(finished)
    assert [p.exit_code for p in workers] == [1, 3], describe(finished)
    # The survivor was answered with the reason, not left waiting.
    assert "ParameterServerError: parameter server" in workers[0].output, describe(finished)
    assert "worker 1 sent nothing" in workers[0].output, describe(finished)


def test_a_worker_that_never_starts_makes_everyone_give_up_after_the_join_timeout(
    tmp_path: Path,
) -> None:
    finished = run_cluster(
        tmp_path / "logs",
        [SCENARIO, "--output", str(tmp_path), "--join-timeout", "3"],
        server_args=["--join-timeout", "3"],
        skip_workers=[1],
    )
    assert [p.exit_code for p in finished] == [1, 1, 1], describe(finished)
    gave_up = "gave up after 3 s waiting for all 4 processes to join"
    # Server 0 hosts the rendezvous, so it always waits out its timeout; the others may
    # instead see the rendezvous close under them first.
    assert f"ps-server-0 {gave_up}" in finished[0].output, describe(finished)
    for process in finished[1:]:
        assert gave_up in process.output or "could not join" in process.output, describe(finished)
