"""The CLI's client talking to the app in the test's own process (a FastAPI TestClient)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from runyard.client import Client


class InProcessClient(Client):
    """The CLI's client, talking to the app in this process."""

    def __init__(self, api: TestClient) -> None:
        super().__init__(url=str(api.base_url))
        self._http.close()
        self._http = api

    def close(self) -> None:
        pass  # the TestClient belongs to its fixture
