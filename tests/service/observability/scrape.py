"""Reading a /metrics answer: each sample by its name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 for one not there (a counter nothing has counted yet)."""
    return found.get((name, frozenset(labels.items())), 0.0)
