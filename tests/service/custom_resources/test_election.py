"""Two controllers, one leader: the Lease election against a Kubernetes API server (kmock,
which refuses a Lease replaced from a stale version, as the real one does)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from service.custom_resources import election
from tests.kube import KubeServer

LEASE_SECONDS = 3


class Candidate:
    """A controller replica whose passes only note that it is leading."""

    def __init__(self, kube: KubeServer, lease: str, name: str, board: Board) -> None:
        self.name, self.board = name, board
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=election.run,
            kwargs={
                "api_client": kube.client(),
                "namespace": "runyard",
                "name": lease,
                "identity": name,
                "lease_seconds": LEASE_SECONDS,
                "lead": self._lead,
                "stop": self.stop,
            },
            daemon=True,
        )

    def _lead(self, lost: threading.Event) -> None:
        with self.board.leading(self.name):
            while not (lost.is_set() or self.stop.is_set()):
                time.sleep(0.05)


class Board:
    """Who leads now, and the most that ever led at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: set[str] = set()
        self.most = 0
        self.leaders: list[str] = []

    def leading(self, name: str) -> _Leading:
        return _Leading(self, name)


class _Leading:
    def __init__(self, board: Board, name: str) -> None:
        self.board, self.name = board, name

    def __enter__(self) -> None:
        with self.board._lock:
            self.board.now.add(self.name)
            self.board.leaders.append(self.name)
            self.board.most = max(self.board.most, len(self.board.now))

    def __exit__(self, *_exc: object) -> None:
        with self.board._lock:
            self.board.now.discard(self.name)


def _until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def candidates(kube_server: KubeServer) -> Iterator[tuple[Board, list[Candidate]]]:
    board = Board()
    lease = f"controller-{uuid.uuid4().hex[:8]}"
    both = [Candidate(kube_server, lease, name, board) for name in ("replica-a", "replica-b")]
    for candidate in both:
        candidate.thread.start()
    yield board, both
    for candidate in both:
        candidate.stop.set()
    for candidate in both:
        candidate.thread.join(15)


def test_two_controllers_elect_one_leader(candidates: tuple[Board, list[Candidate]]) -> None:
    board, _both = candidates
    _until(lambda: len(board.now) == 1, timeout=10)
    first = next(iter(board.now))
    # Several renewals later: still that one, alone.
    time.sleep(LEASE_SECONDS * 1.5)
    assert board.now == {first}
    assert board.leaders == [first]
    assert board.most == 1


def test_the_other_takes_over_when_the_leader_stops(
    candidates: tuple[Board, list[Candidate]],
) -> None:
    board, both = candidates
    _until(lambda: len(board.now) == 1, timeout=10)
    leader = next(c for c in both if c.name in board.now)
    follower = next(c for c in both if c is not leader)
    leader.stop.set()
    leader.thread.join(10)
    _until(lambda: board.now == {follower.name}, timeout=LEASE_SECONDS + 5)
    assert board.leaders == [leader.name, follower.name]
    assert board.most == 1
