"""Token formats.

User tokens (``ry_...``) are random and stored hashed. Instance tokens
(``ryi_<job id>_<host>_<mac>``) are derived from the job id and the instance's host name
with the server's signing key, so every attempt to launch a job's instances hands out the
same tokens and nothing needs to be stored or cleaned up; each instance reports for
itself alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

USER_PREFIX = "ry_"
INSTANCE_PREFIX = "ryi_"
# AWS-style credentials of a user token, for SigV4 clients (boto3, the SageMaker SDKs):
# the access key id names the token, the secret is derived from it with the signing key.
# An id is the prefix and 16 random characters of AWS's own alphabet (20 in all, as
# AWS's): ids say nothing of each other, so none can be guessed from another.
ACCESS_KEY_PREFIX = "RYAK"
_ACCESS_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
# The ids of tokens made before ids were random: the row's number, in hexadecimal.
_LEGACY_ACCESS_KEY = re.compile(ACCESS_KEY_PREFIX + r"([0-9A-F]{16})")


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


def new_access_key_id() -> str:
    return ACCESS_KEY_PREFIX + "".join(secrets.choice(_ACCESS_KEY_ALPHABET) for _ in range(16))


def legacy_access_key_id(token_id: int) -> str:
    """The AWS access key id of a user token made before ids were random."""
    return f"{ACCESS_KEY_PREFIX}{token_id:016X}"


def token_id_of_legacy_access_key(access_key: str) -> int | None:
    match = _LEGACY_ACCESS_KEY.fullmatch(access_key)
    token_id = None if match is None else int(match.group(1), 16)
    # Token rows are numbered in a 32-bit column: a larger number names none.
    return token_id if token_id is not None and token_id < 2**31 else None


def secret_access_key(key: bytes, token_id: int, token_hash: str) -> str:
    """The AWS secret of a user token: derived, never stored, so it exists only where the
    signing key does. The token's hash takes part, so no other token shares it."""
    mac = hmac.new(key, f"aws:{token_id}:{token_hash}".encode(), hashlib.sha256).digest()
    return base64.b64encode(mac).decode()[:40]
