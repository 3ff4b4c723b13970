"""The request that would submit a job again, from the record the server keeps of it.

The record is the request with what the server chose at submission: the job's name, its
image (from image_uri or framework_version and py_version, which the record keeps as they
were sent), its backend, and the hyperparameters its distribution hands the script. Those
are left out, so the server chooses them again as it did the first time; the rest is the
request as it was sent, output_path included (the server's default, where the job named
none: the new job writes below it, beside the first, under its own name).
"""

from __future__ import annotations

import re
from typing import Any

from contract import modes

# A name the server generated: <base>-<UTC timestamp to the millisecond>.
_GENERATED = re.compile(r"^(?P<base>.+)-\d{4}(?:-\d{2}){5}-\d{3}$")
_CHOSEN_BY_THE_SERVER = ("name", "image", "backend")


def request_of(job: dict[str, Any]) -> dict[str, Any]:
    """What submitting ``job`` again sends, but for its name: a new one is generated
    from the first's (``train-2026-...`` gives ``train-<now>``, ``job-1`` gives
    ``job-1-<now>``)."""
    spec = {key: value for key, value in job["spec"].items() if key not in _CHOSEN_BY_THE_SERVER}
    added = modes.hyperparameters(spec.get("distribution") or {})
    spec["hyperparameters"] = {
        key: value
        for key, value in (spec.get("hyperparameters") or {}).items()
        if not (key in added and added[key] == value)
    }
    generated = _GENERATED.match(job["name"])
    spec["base_job_name"] = generated.group("base") if generated else job["name"]
    return spec
