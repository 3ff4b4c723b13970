"""Token formats.

User tokens (``ry_...``) are random and stored hashed. Job tokens (``ryj_<job id>_<mac>``)
are derived from the job id with the server's signing key, so every attempt to launch a
job's instances hands out the same token and nothing needs to be stored or cleaned up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

USER_PREFIX = "ry_"
JOB_PREFIX = "ryj_"


def new_user_token() -> str:
    return USER_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def job_token(key: bytes, job_id: str) -> str:
    return f"{JOB_PREFIX}{job_id}_{_job_mac(key, job_id)}"


def job_id_from_token(key: bytes, token: str) -> str | None:
    """The job a job token was issued for, or None if it is not a valid job token."""
    if not token.startswith(JOB_PREFIX):
        return None
    job_id, _, mac = token[len(JOB_PREFIX) :].partition("_")
    if not job_id or not hmac.compare_digest(mac, _job_mac(key, job_id)):
        return None
    return job_id


def _job_mac(key: bytes, job_id: str) -> str:
    return hmac.new(key, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()
