"""A metric's series in one line of text: a sparkline that any terminal or log shows."""

from __future__ import annotations

from collections.abc import Sequence

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 32) -> str:
    """``values`` in at most ``width`` bars, each the mean of its share of the points,
    scaled from the lowest to the highest (a flat series is a flat line)."""
    if not values:
        return ""
    buckets = _means(values, width)
    low, high = min(buckets), max(buckets)
    span = high - low
    if span == 0:
        return BARS[0] * len(buckets)
    top = len(BARS) - 1
    return "".join(BARS[round((value - low) / span * top)] for value in buckets)


def _means(values: Sequence[float], width: int) -> list[float]:
    if len(values) <= width:
        return list(values)
    means = []
    for index in range(width):
        share = values[index * len(values) // width : (index + 1) * len(values) // width]
        means.append(sum(share) / len(share))
    return means
