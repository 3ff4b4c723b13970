"""The request that would submit a job again: the server's answer for it
(``GET /v1/training-jobs/{name}/clone``, which leaves out what it chose at submission), and
a base for the new job's name from the first's.
"""

from __future__ import annotations

import re
from typing import Any

from runyard.client import Client

# A name the server generated: <base>-<UTC timestamp to the millisecond>.
_GENERATED = re.compile(r"^(?P<base>.+)-\d{4}(?:-\d{2}){5}-\d{3}$")


def request_of(client: Client, original: str) -> dict[str, Any]:
    """What submitting ``original`` again sends, but for its name: a new one is generated
    from the first's (``train-2026-...`` gives ``train-<now>``, ``job-1`` gives
    ``job-1-<now>``)."""
    spec = client.clone_spec(original)
    generated = _GENERATED.match(original)
    spec["base_job_name"] = generated.group("base") if generated else original
    return spec
