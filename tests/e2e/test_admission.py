"""A job waiting for capacity starts when the job ahead of it lets go, woken by that job's
own reconcile rather than found by beat's sweep (here set to come round only hourly)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("runyard-one-slot")
    stack = Stack(home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}")
    stack.env["RUNYARD_CAPACITY"] = '{"local": 1}'
    stack.env["RUNYARD_WAITING_SWEEP_SECONDS"] = "3600"
    stack.up()
    yield stack
    assert stack.down() == [], "processes of finished jobs were left running"


def test_the_next_in_line_starts_when_capacity_frees(one_slot: Stack) -> None:
    with one_slot.client() as client:
        first = one_slot.submit(
            client, "scripts", name="holds-the-slot", entry_point="long_running.py"
        )
        one_slot.wait_for(client, first["name"], lambda job: job["secondary_status"] == "Training")
        second = one_slot.submit(client, "scripts", name="waits", entry_point="report_env.py")
        waiting = one_slot.wait_for(
            client, second["name"], lambda job: job["secondary_status"] == "Pending"
        )
        assert waiting["pending_reason"]
        client.stop_job(first["name"])
        done = one_slot.wait_until_ended(client, second["name"], timeout=90)
        assert done["status"] == "Completed", one_slot.explain(done, [])
        stopped = client.get_job(first["name"])
    assert stopped["status"] == "Stopped"
    launched = next(t for t in done["transitions"] if t["secondary_status"] == "LaunchingInstances")
    assert launched["start_time"] >= stopped["transitions"][-1]["start_time"]
