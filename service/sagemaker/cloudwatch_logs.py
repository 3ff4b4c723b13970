"""The CloudWatch Logs operations the SageMaker SDK reads training logs with.

Every job's lines are in the log group ``/aws/sagemaker/TrainingJobs``, one stream per
host named ``<job>/algo-N-<epoch seconds of the job's creation>``, as SageMaker names
them. A stream exists once its host has printed a line. Tokens are positions in a host's
numbered lines (``f/<seq>`` forward, ``b/<seq>`` backward).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, tuple_

from service.auth.access import Role
from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.kit import keyset
from service.kit.db import from_micros, read_pages_in_index_order, to_micros
from service.kit.errors import NotFound
from service.logs import pages, reading
from service.logs.models import LogChunk
from service.logs.reading import StoredLine
from service.sagemaker import log_streams, page_tokens, translate
from service.sagemaker.errors import AwsError
from service.sagemaker.log_streams import Stream, StreamJob, stream_name
from service.sagemaker.training import Call, Operation

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
DEFAULT_EVENTS = 10_000
DEFAULT_STREAMS = 50
DEFAULT_FILTERED = 10_000
_STREAM = re.compile(r"(?P<job>[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})/(?P<host>algo-[1-9][0-9]*)-[0-9]+")
_TOKEN = re.compile(r"(?P<way>[fb])/(?P<seq>[0-9]{1,18})")
PlaceT = TypeVar("PlaceT")


def describe_log_streams(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _check_group(call, params)
    prefix = params.get("logStreamNamePrefix", "")
    order_by = params.get("orderBy", "LogStreamName")
    if prefix and order_by == "LastEventTime":
        raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
    limit = params.get("limit", DEFAULT_STREAMS)
    page, after = log_streams.page(
        call.session,
        call.principal.project,
        prefix,
        by_creation=order_by == "LastEventTime",
        descending=bool(params.get("descending")),
        limit=limit,
        after=_place_in(
            params,
            log_streams.place_parser(
                by_creation=order_by == "LastEventTime", descending=bool(params.get("descending"))
            ),
        ),
    )
    answer: dict[str, Any] = {"logStreams": [_stream_entry(s, call.region) for s in page]}
    # Only while more may remain: the SageMaker SDK asks again as long as a token is there.
    if after is not None:
        answer["nextToken"] = _place_token(params, keyset.to_json(after))
    return answer


def get_log_events(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _check_group(call, params)
    job, host = _stream_of(call, params["logStreamName"])
    limit = params.get("limit", DEFAULT_EVENTS)
    start, end = _window(params)
    token = params.get("nextToken")
    backward, seq = False, 0
    if token is not None:
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise _invalid("The specified nextToken is invalid.")
        backward, seq = match.group("way") == "b", int(match.group("seq"))
    elif not params.get("startFromHead", False):
        backward = True  # without a token or startFromHead: the latest events
    chunks = _chunks_within(start, end)
    if backward:
        before = seq if token is not None else None
        lines = reading.by_seq(
            call.session, job.id, host, before=before, descending=True, where=chunks
        )
    else:
        lines = reading.by_seq(call.session, job.id, host, after=seq, where=chunks)
    # At most 1 MB of events, as CloudWatch's: backward, the latest that fit.
    with closing(lines):
        rows, _more = pages.filled(
            lines,
            attrgetter("message"),
            limit=limit,
            keep=lambda line: _is_within(line, start, end),
        )
    if backward:
        rows.reverse()
    # With nothing new the tokens stay where they were, as CloudWatch's do.
    forward, back = (rows[-1].seq, rows[0].seq) if rows else (seq, seq)
    return {
        "events": [_event(row) for row in rows],
        "nextForwardToken": f"f/{forward}",
        "nextBackwardToken": f"b/{back}",
    }


def filter_log_events(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _check_group(call, params)
    names = params.get("logStreamNames")
    prefix = params.get("logStreamNamePrefix", "")
    if names and prefix:
        raise _invalid("logStreamNames and logStreamNamePrefix cannot both be given.")
    if names:
        return _filter_streams(call, params, [_stream_of(call, name) for name in names])
    # Without names, the lines of every stream the prefix matches, however many jobs: read a
    # job at a time, up to a budget (log_streams.walk_lines), and a token to go on from.
    start, end = _window(params)
    walk = log_streams.walk_lines(
        call.session,
        call.principal.project,
        prefix,
        terms=_terms(params.get("filterPattern", "")),
        start=start,
        end=end,
        limit=params.get("limit", DEFAULT_FILTERED),
        after=_place_in(params, log_streams.line_place),
    )
    answer: dict[str, Any] = {
        "events": [_filtered(job, row) for job, row in walk.events],
        "searchedLogStreams": [
            {"logStreamName": name, "searchedCompletely": completely}
            for name, completely in walk.searched.items()
        ],
    }
    if walk.after is not None:
        answer["nextToken"] = _place_token(params, log_streams.line_place_json(walk.after))
    return answer


def _filter_streams(
    call: Call, params: dict[str, Any], wanted: list[tuple[TrainingJob, str]]
) -> dict[str, Any]:
    """FilterLogEvents over the streams named (at most 100, as CloudWatch's): their lines
    in time order across them, equal times as they arrived. Looks at LINES_LOOKED_AT
    lines at most, matching or not: a page that reached that many before it filled is
    short, with a token to go on from the last line looked at, as CloudWatch's may be."""
    terms = _terms(params.get("filterPattern", ""))
    limit = params.get("limit", DEFAULT_FILTERED)
    by_id = {job.id: job for job, _ in wanted}
    streams = (
        LogChunk.job_id.in_(sorted(by_id)),
        tuple_(LogChunk.job_id, LogChunk.host).in_([(job.id, host) for job, host in wanted]),
    )
    start, end = _window(params)
    after = _place_in(params, reading.place_from_json)
    read_pages_in_index_order(call.session)
    page: list[StoredLine] = []
    used = 0
    last: reading.Place | None = None
    more = False
    lines = reading.by_time(call.session, streams, after=after, start=start, end=end)
    with closing(lines):
        for looked, line in enumerate(lines):
            if looked == log_streams.LINES_LOOKED_AT:
                more = True
                break
            if all(term in line.message for term in terms):
                size = pages.event_bytes(line.message)
                if len(page) == limit or (page and used + size > pages.PAGE_BYTES):
                    more = True
                    break
                page.append(line)
                used += size
            last = (line.micros, line.id)
    answer: dict[str, Any] = {
        "events": [_filtered(by_id[row.job_id], row) for row in page],
        "searchedLogStreams": [
            {"logStreamName": stream_name(job, host), "searchedCompletely": True}
            for job, host in wanted
        ],
    }
    if more and last is not None:
        answer["nextToken"] = _place_token(params, reading.place_json(last))
    return answer


def _filtered(job: StreamJob, row: StoredLine) -> dict[str, Any]:
    return {
        **_event(row),
        "logStreamName": stream_name(job, row.host),
        "eventId": f"{row.job_id}-{row.host}-{row.seq}",
    }


def _terms(pattern: str) -> list[str]:
    # CloudWatch's filter syntax, in its simplest and commonest form: every term must
    # appear ("a b"), a quoted phrase as it stands.
    return [quoted or bare for quoted, bare in re.findall(r'"([^"]*)"|(\S+)', pattern)]


# A token holds a place in the answer's order and a digest of the request it was given for
# (page_tokens), so that one of another request (another prefix, pattern, order) is refused
# rather than read as a place in this one.
_NOT_IN_TOKEN = ("nextToken", "limit")


def _place_token(params: dict[str, Any], place: Any) -> str:
    digest = page_tokens.digest(params, _NOT_IN_TOKEN)
    return base64.urlsafe_b64encode(json.dumps([place, digest]).encode()).decode()


def _place_in(params: dict[str, Any], parse: Callable[[Any], PlaceT | None]) -> PlaceT | None:
    """The place the request's nextToken holds (None without one), read by ``parse``;
    refused unless this server gave the token for this request."""
    token = params.get("nextToken")
    if token is None:
        return None
    place: PlaceT | None = None
    try:
        given, digest = json.loads(base64.urlsafe_b64decode(token.encode()))
        if digest == page_tokens.digest(params, _NOT_IN_TOKEN):
            place = parse(given)
    except (ValueError, TypeError, AttributeError, binascii.Error):
        place = None
    if place is None:
        raise _invalid("The specified nextToken is invalid.")
    return place


def _stream_of(call: Call, name: str) -> tuple[TrainingJob, str]:
    match = _STREAM.fullmatch(name)
    if match is not None:
        try:
            job = lookup.get(call.session, match.group("job"), call.principal)
        except NotFound:
            job = None
        host = match.group("host")
        if job is not None and stream_name(job, host) == name and host in lookup.hosts(job):
            return job, host
    raise AwsError("ResourceNotFoundException", "The specified log stream does not exist.")


def _check_group(call: Call, params: dict[str, Any]) -> None:
    group = params.get("logGroupName") or params.get("logGroupIdentifier")
    if group != LOG_GROUP:
        raise AwsError("ResourceNotFoundException", "The specified log group does not exist.")
    call.principal.require(Role.VIEWER, call.principal.project, "reading logs")


def _window(params: dict[str, Any]) -> tuple[int | None, int | None]:
    """The request's startTime and endTime (milliseconds) in microseconds."""
    start, end = params.get("startTime"), params.get("endTime")
    return (
        None if start is None else _micros(start),
        None if end is None else _micros(end),
    )


def _micros(ms: int) -> int:
    try:
        return to_micros(datetime.fromtimestamp(ms / 1000, UTC))
    except (OverflowError, OSError, ValueError):
        raise _invalid("A time is out of range.") from None


def _chunks_within(start: int | None, end: int | None) -> tuple[ColumnElement[bool], ...]:
    """The chunks that may hold a line of the window."""
    where = []
    if start is not None:
        where.append(LogChunk.last_time >= from_micros(start))
    if end is not None:
        where.append(LogChunk.first_time < from_micros(end))
    return tuple(where)


def _is_within(line: StoredLine, start: int | None, end: int | None) -> bool:
    return (start is None or line.micros >= start) and (end is None or line.micros < end)


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _event(row: StoredLine) -> dict[str, Any]:
    # Runyard keeps when the instance printed a line, not when it arrived: both are that.
    at = row.micros // 1000
    return {"timestamp": at, "message": row.message, "ingestionTime": at}


def _stream_entry(stream: Stream, region: str) -> dict[str, Any]:
    account = translate.account_id(stream.job.project)
    return {
        "logStreamName": stream.name,
        "creationTime": _ms(stream.job.created_at),
        "firstEventTimestamp": _ms(stream.first),
        "lastEventTimestamp": _ms(stream.last),
        "lastIngestionTime": _ms(stream.last),
        "uploadSequenceToken": str(stream.lines),
        "arn": f"arn:aws:logs:{region}:{account}:log-group:{LOG_GROUP}:log-stream:{stream.name}",
        "storedBytes": 0,
    }


def _invalid(message: str) -> AwsError:
    return AwsError("InvalidParameterException", message)


OPERATIONS: dict[str, Operation] = {
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
