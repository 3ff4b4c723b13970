"""Token formats.

User tokens (``ry_...``) are random and stored hashed. Instance tokens
(``ryi_<job id>_<host>_<mac>``) are derived from the job id and the instance's host name
with the server's signing key, so every attempt to launch a job's instances hands out the
same tokens and nothing needs to be stored or cleaned up; each instance reports for
itself alone.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

USER_PREFIX = "ry_"
INSTANCE_PREFIX = "ryi_"


def new_user_token() -> str:
    return USER_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def instance_token(key: bytes, job_id: str, host: str) -> str:
    return f"{INSTANCE_PREFIX}{job_id}_{host}_{_instance_mac(key, job_id, host)}"


def instance_from_token(key: bytes, token: str) -> tuple[str, str] | None:
    """The job and host an instance token was issued for, or None if it is not one."""
    if not token.startswith(INSTANCE_PREFIX):
        return None
    parts = token[len(INSTANCE_PREFIX) :].split("_")
    if len(parts) != 3:
        return None
    job_id, host, mac = parts
    if not job_id or not host or not hmac.compare_digest(mac, _instance_mac(key, job_id, host)):
        return None
    return job_id, host


def agent_key(key: bytes, job_id: str) -> str:
    """The secret a job's launch agents share: derived like its tokens, never stored."""
    return hmac.new(key, f"agent:{job_id}".encode(), hashlib.sha256).hexdigest()


def _instance_mac(key: bytes, job_id: str, host: str) -> str:
    return hmac.new(key, f"instance:{job_id}:{host}".encode(), hashlib.sha256).hexdigest()
