"""A Runyard whose server, and so every local instance, runs with the suite's TensorFlow
environment (``tests.tensorflow.environment``): what a user gets by installing the
``tensorflow`` extra where the server runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Stack
from tests.tensorflow.environment import tf_python


@pytest.fixture(scope="module")
def tf_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    python = str(tf_python())
    home = tmp_path_factory.mktemp("runyard-tf")
    running = Stack(
        home, f"sqlite:///{home / 'runyard.db'}", f"sqla+sqlite:///{home / 'broker.db'}", python
    ).up()
    yield running
    assert running.down() == [], "processes of finished jobs were left running"
