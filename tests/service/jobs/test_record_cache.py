"""A job's parsed record is kept for as long as its stored form is the same."""

from __future__ import annotations

import copy

from service.jobs import record
from service.jobs.record import JobRecord, record_of

STORED = {
    "name": "kept",
    "output_path": "file:///tmp/out",
    "instance_type": "local",
    "entry_point": "train.py",
    "source_uri": "file:///tmp/src",
    "hyperparameters": {"epochs": "3"},
}


def test_a_record_read_again_is_not_parsed_again(monkeypatch) -> None:
    first = record_of("job-kept", STORED)
    parses = []
    monkeypatch.setattr(JobRecord, "load", classmethod(lambda cls, spec: parses.append(spec)))
    # The same stored form, as another read of the row returns it: a dict of its own.
    again = record_of("job-kept", copy.deepcopy(STORED))
    assert again is first
    assert parses == []


def test_another_stored_form_is_parsed_anew() -> None:
    first = record_of("job-changed", STORED)
    changed = {**STORED, "hyperparameters": {"epochs": "4"}}
    second = record_of("job-changed", changed)
    assert second is not first
    assert second.hyperparameters == {"epochs": "4"}
    # And the one kept from then on is the new one's.
    assert record_of("job-changed", copy.deepcopy(changed)) is second


def test_records_of_two_jobs_are_kept_apart() -> None:
    one = record_of("job-one", STORED)
    other = record_of("job-other", {**STORED, "name": "other"})
    assert one.name == "kept"
    assert other.name == "other"


def test_the_kept_records_are_bounded() -> None:
    for number in range(record._PARSED_JOBS + 10):
        record_of(f"job-{number}", STORED)
    assert len(record._parsed) <= record._PARSED_JOBS
