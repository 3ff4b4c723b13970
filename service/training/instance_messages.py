"""What the runtime on an instance sends about its job (``contract.protocol``), as the
service validates it: the contract's fields and bounds, and what the database needs."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from contract import protocol
from contract.failures import fit
from service.jobs.spec_parts import Strict
from service.kit.protocol import body_reader, model_of, request_body
from service.kit.text import LookupText, StorableText, without_nul


def _fitted(value: str) -> str:
    # An instance's last words: cut to what a job keeps, not refused.
    return without_nul(fit(value))


StatusReportBody = model_of(
    protocol.StatusReport,
    base=Strict,
    refined={
        "message": StorableText,
        "failure_reason": Annotated[str, AfterValidator(_fitted)] | None,
        # The job keeps it and the model is fetched from it: refused, not repaired.
        "model_uri": LookupText | None,
    },
)
InterruptionNoticeBody = model_of(
    protocol.InterruptionNotice, base=Strict, refined={"message": StorableText}
)

read_status_report = body_reader(protocol.StatusReport, StatusReportBody)
read_interruption_notice = body_reader(protocol.InterruptionNotice, InterruptionNoticeBody)
INTERRUPTION_NOTICE_BODY = request_body(InterruptionNoticeBody)
