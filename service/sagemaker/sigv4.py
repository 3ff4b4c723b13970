"""Checking an AWS Signature Version 4 (the ``Authorization`` header) as AWS does.

The signature is computed again with botocore's own signer from the request as it
arrived, over the headers the client says it signed, and compared in constant time. The
request's time must be within ``MAX_SKEW`` of the server's, so a captured request cannot be
replayed later. The errors are AWS's: ``MissingAuthenticationTokenException`` (no
signature), ``IncompleteSignature`` (a malformed one) and ``InvalidSignatureException``
(a wrong or stale one).

An access key nobody holds, or a revoked token's, goes through the same checks as any
other, with a secret nobody knows, and fails as a wrong secret does, where AWS would
answer ``UnrecognizedClientException``: one answer for every bad key, so that whoever
tries ids learns nothing of which ones exist or were revoked.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from service.sagemaker.errors import AwsError

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW = timedelta(minutes=15)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)=([^,\s]*)\s*")
# <access key>/<day>/<region>/<service>/aws4_request
_SCOPE = re.compile(
    r"([A-Za-z0-9]{16,128})/([0-9]{8})/([a-z0-9-]{1,32})/([a-z0-9-]{1,32})/aws4_request"
)
_SIGNED_HEADERS = re.compile(r"[a-z0-9-]+(;[a-z0-9-]+)*")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
# What a key nobody holds is checked with: as long as a real secret, known to nobody.
_NOBODYS_SECRET = secrets.token_urlsafe(30)[:40]
Holder = TypeVar("Holder")


@dataclass(frozen=True)
class Signature:
    """What the ``Authorization`` header says: who signed, for which day, region and
    service, over which headers."""

    access_key: str
    day: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    value: str
    amz_date: str


def read(headers: Mapping[str, str]) -> Signature:
    """The request's signature, as claimed; raises AwsError when there is none or it is
    not one."""
    header = headers.get("authorization")
    if not header:
        raise AwsError(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token: sign requests with AWS Signature Version 4 and "
            "the credentials `runyard token --aws` prints",
            403,
        )
    algorithm, _, rest = header.partition(" ")
    if algorithm != ALGORITHM:
        raise _incomplete(f"Only {ALGORITHM} signatures are accepted, not {algorithm[:32]!r}.")
    fields = {}
    for part in rest.split(","):
        match = _FIELD.fullmatch(part)
        if match is None:
            raise _incomplete(f"Authorization header part {part.strip()[:40]!r} is not key=value.")
        fields[match.group(1)] = match.group(2)
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if name not in fields]
    if missing:
        raise _incomplete(f"Authorization header requires {', '.join(missing)}.")
    scope = _SCOPE.fullmatch(fields["Credential"])
    if scope is None:
        raise _incomplete(
            "Credential must be <access key>/<yyyymmdd>/<region>/<service>/aws4_request."
        )
    if not _SIGNED_HEADERS.fullmatch(fields["SignedHeaders"]):
        raise _incomplete("SignedHeaders must be lowercase header names joined by ';'.")
    if not _SIGNATURE.fullmatch(fields["Signature"]):
        raise _incomplete("Signature must be 64 hexadecimal digits.")
    signed = tuple(fields["SignedHeaders"].split(";"))
    if "host" not in signed:
        raise _incomplete("SignedHeaders must include host.")
    amz_date = headers.get("x-amz-date", "")
    if "x-amz-date" not in signed or not amz_date:
        raise _incomplete("The request must carry a signed X-Amz-Date header.")
    return Signature(
        access_key=scope.group(1),
        day=scope.group(2),
        region=scope.group(3),
        service=scope.group(4),
        signed_headers=signed,
        value=fields["Signature"],
        amz_date=amz_date,
    )


@dataclass(frozen=True)
class Arrived:
    """The request as it arrived, as signing saw it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes


def verify(
    signature: Signature,
    secret: str,
    request: Arrived,
    service: str,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Raises InvalidSignatureException unless ``secret`` signed ``request`` for
    ``service`` within the allowed time."""
    if signature.service != service:
        raise _invalid(f"Credential should be scoped to correct service: '{service}'.")
    try:
        when = datetime.strptime(signature.amz_date, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        raise _invalid("X-Amz-Date must be in the form yyyyMMdd'T'HHmmss'Z'.") from None
    if signature.day != signature.amz_date[:8]:
        raise _invalid(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            "from HTTP."
        )
    current = now()
    if abs(current - when) > MAX_SKEW:
        raise _invalid(
            f"Signature expired: {signature.amz_date} is now earlier than "
            f"{(current - MAX_SKEW).strftime(_AMZ_DATE)} ({current.strftime(_AMZ_DATE)} - 15 min.)"
            if when < current
            else f"Signature not yet current: {signature.amz_date} is still later than "
            f"{(current + MAX_SKEW).strftime(_AMZ_DATE)} ({current.strftime(_AMZ_DATE)} + 15 min.)"
        )
    expected = _signature_of(signature, secret, request)
    if not hmac.compare_digest(expected, signature.value):
        raise mismatch()


def _signature_of(signature: Signature, secret: str, request: Arrived) -> str:
    # botocore signs what it is given: hand it the signed headers only, as they arrived.
    headers = {}
    for name in signature.signed_headers:
        value = request.headers.get(name)
        if value is None:
            raise _invalid(f"Header {name!r} is signed but missing from the request.")
        headers[name] = value
    prepared = AWSRequest(
        method=request.method, url=request.url, headers=headers, data=request.body
    )
    prepared.context["timestamp"] = signature.amz_date
    signer = SigV4Auth(
        Credentials(signature.access_key, secret), signature.service, signature.region
    )
    canonical = signer.canonical_request(prepared)
    return str(signer.signature(signer.string_to_sign(prepared, canonical), prepared))


def verify_holder(
    signature: Signature,
    holder: tuple[Holder, str] | None,
    request: Arrived,
    service: str,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Holder:
    """Who signed ``request``: ``holder`` (who holds the access key, and its secret, or
    None for a key nobody holds) once its secret is found to have signed it. Every bad
    key fails the same way, at the same step, as a wrong secret (see the module)."""
    if holder is None:
        verify(signature, _NOBODYS_SECRET, request, service, now)
        raise mismatch()  # should the secret ever be guessed
    who, secret = holder
    verify(signature, secret, request, service, now)
    return who


def mismatch() -> AwsError:
    """The one answer to a wrong secret, an unknown access key and a revoked one."""
    return _invalid(
        "The request signature we calculated does not match the signature you provided. "
        "Check your AWS Access Key ID, Secret Access Key and signing method."
    )


def _incomplete(message: str) -> AwsError:
    return AwsError("IncompleteSignature", message)


def _invalid(message: str) -> AwsError:
    return AwsError("InvalidSignatureException", message)
