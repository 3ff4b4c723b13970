"""The chart, loaded once per test module with Helm's own engine."""

from __future__ import annotations

from collections.abc import Iterator

import helm_python as helm
import pytest

from tests.deploy.chart import CHART


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded
