"""Browser sessions for the console: a signed cookie that names a token, never holds it.

Signing in with a token sets ``runyard_session`` (HttpOnly, SameSite=Strict, Secure over
HTTPS): the token's id, when the session began, and the session's random id, signed with
the server's key. Each request looks the session and its token up again, so signing out
ends the session on the server (a copy of the cookie is refused too) and revoking the
token ends its sessions at once. A cookie is sent by the browser on its own, so a request
that changes anything must also carry ``X-CSRF-Token``: a value derived from the cookie
that the console's pages receive in the body of ``GET /v1/me`` and a cross-site page
cannot read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

COOKIE = "runyard_session"
CSRF_HEADER = "X-CSRF-Token"
# A working day: a console left open overnight asks for the token again.
LIFETIME_SECONDS = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Session:
    token_id: int
    began: int
    id: str  # the row that says whether the session still stands
    value: str  # the cookie as set

    def csrf(self, key: bytes) -> str:
        return _mac(key, f"csrf:{self.value}")


def begin(key: bytes, token_id: int, now: float | None = None) -> Session:
    began = int(time.time() if now is None else now)
    session_id = secrets.token_hex(16)
    body = f"{token_id}.{began}.{session_id}"
    encoded = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
    return Session(token_id, began, session_id, f"{encoded}.{_mac(key, body)}")


def read(key: bytes, value: str, now: float | None = None) -> Session | None:
    """The session a cookie stands for, or None if it is forged, malformed or expired."""
    encoded, _, mac = value.partition(".")
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        token_id, began, session_id = body.split(".")
        session = Session(int(token_id), int(began), session_id, value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not hmac.compare_digest(mac, _mac(key, body)):
        return None
    age = (time.time() if now is None else now) - session.began
    return session if 0 <= age <= LIFETIME_SECONDS else None


def csrf_ok(key: bytes, session: Session, method: str, header: str | None) -> bool:
    if method.upper() in SAFE_METHODS:
        return True
    return header is not None and hmac.compare_digest(header, session.csrf(key))


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, f"session:{text}".encode(), hashlib.sha256).hexdigest()
