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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import func, select, tuple_

from service.auth.access import Role
from service.jobs import lookup
from service.jobs.models import TrainingJob
from service.kit import keyset
from service.kit.db import read_pages_in_index_order
from service.kit.errors import NotFound
from service.logs import pages
from service.logs.models import LogEvent
from service.sagemaker import translate
from service.sagemaker.errors import AwsError
from service.sagemaker.training import Call, Operation

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
DEFAULT_EVENTS = 10_000
DEFAULT_STREAMS = 50
DEFAULT_FILTERED = 10_000
_STREAM = re.compile(r"(?P<job>[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})/(?P<host>algo-[1-9][0-9]*)-[0-9]+")
_TOKEN = re.compile(r"(?P<way>[fb])/(?P<seq>[0-9]{1,18})")


class StreamJob(Protocol):
    """A job whose hosts are streams: the job itself, or a row of these columns."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


@dataclass(frozen=True)
class Stream:
    job: StreamJob
    host: str
    first: datetime
    last: datetime
    lines: int

    @property
    def name(self) -> str:
        return stream_name(self.job, self.host)


def stream_name(job: StreamJob, host: str) -> str:
    return f"{job.name}/{host}-{int(job.created_at.timestamp())}"


def describe_log_streams(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _check_group(call, params)
    prefix = params.get("logStreamNamePrefix", "")
    order_by = params.get("orderBy", "LogStreamName")
    if prefix and order_by == "LastEventTime":
        raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
    job_prefix = prefix.split("/", 1)[0]
    found = _streams(call, job_prefix, exact="/" in prefix)
    streams = [stream for stream in found if stream.name.startswith(prefix)]
    if order_by == "LastEventTime":
        streams.sort(key=lambda s: (s.last, s.name), reverse=bool(params.get("descending")))
    else:
        streams.sort(key=lambda s: s.name, reverse=bool(params.get("descending")))
    start = _offset(params.get("nextToken"))
    limit = params.get("limit", DEFAULT_STREAMS)
    page = streams[start : start + limit]
    answer: dict[str, Any] = {"logStreams": [_stream_entry(s, call.region) for s in page]}
    # Only while more remain: the SageMaker SDK asks again as long as a token is there.
    if start + limit < len(streams):
        answer["nextToken"] = _offset_token(start + limit)
    return answer


def get_log_events(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _check_group(call, params)
    job, host = _stream_of(call, params["logStreamName"])
    limit = params.get("limit", DEFAULT_EVENTS)
    query = select(LogEvent).where(LogEvent.job_id == job.id, LogEvent.host == host)
    query = _within(query, params.get("startTime"), params.get("endTime"))
    token = params.get("nextToken")
    backward, seq = False, 0
    if token is not None:
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise _invalid("The specified nextToken is invalid.")
        backward, seq = match.group("way") == "b", int(match.group("seq"))
        query = query.where(LogEvent.seq < seq if backward else LogEvent.seq > seq)
    elif not params.get("startFromHead", False):
        backward = True  # without a token or startFromHead: the latest events
    ordered = query.order_by(LogEvent.seq.desc() if backward else LogEvent.seq)
    # At most 1 MB of events, as CloudWatch's: backward, the latest that fit.
    rows, _more = pages.read_page(call.session, ordered.limit(limit), limit=limit)
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
    wanted: list[tuple[StreamJob, str]]
    if names:
        wanted = [_stream_of(call, name) for name in names]
    else:
        job_prefix = prefix.split("/", 1)[0]
        wanted = [
            (s.job, s.host)
            for s in _streams(call, job_prefix, exact="/" in prefix)
            if s.name.startswith(prefix)
        ]
    terms = _terms(params.get("filterPattern", ""))
    limit = params.get("limit", DEFAULT_FILTERED)
    by_id = {job.id: job for job, _ in wanted}
    page: list[LogEvent] = []
    more = False
    if wanted:
        query = select(LogEvent).where(
            LogEvent.job_id.in_(sorted(by_id)),
            tuple_(LogEvent.job_id, LogEvent.host).in_([(job.id, host) for job, host in wanted]),
        )
        query = _within(query, params.get("startTime"), params.get("endTime"))
        # The database narrows by every term (its LIKE may ignore case, as SQLite's does);
        # each row is then matched exactly here, read as the page fills (pages.read_page).
        for term in terms:
            query = query.where(LogEvent.message.contains(term, autoescape=True))
        position = _position(params.get("nextToken"))
        if position is not None:
            query = query.where(keyset.after(_FILTER_KEYS, position))
        read_pages_in_index_order(call.session)
        page, more = pages.read_page(
            call.session,
            query.order_by(*keyset.ordering(_FILTER_KEYS)),
            limit=limit,
            keep=lambda row: all(term in row.message for term in terms),
        )
    answer: dict[str, Any] = {
        "events": [
            {
                **_event(row),
                "logStreamName": stream_name(by_id[row.job_id], row.host),
                "eventId": f"{row.job_id}-{row.host}-{row.seq}",
            }
            for row in page
        ],
        "searchedLogStreams": [
            {"logStreamName": stream_name(job, host), "searchedCompletely": True}
            for job, host in wanted
        ],
    }
    if more:
        answer["nextToken"] = _position_token(page[-1])
    return answer


# Events across streams in time order, equal times as they arrived: a total order, so a page
# ends at a row the next page starts after. A job's lines are indexed in this order, so the
# lines of one job (as the SageMaker SDK asks for them) are read in it as the page fills.
_FILTER_KEYS = (keyset.Key(LogEvent.time), keyset.Key(LogEvent.id))


def _terms(pattern: str) -> list[str]:
    # CloudWatch's filter syntax, in its simplest and commonest form: every term must
    # appear ("a b"), a quoted phrase as it stands.
    return [quoted or bare for quoted, bare in re.findall(r'"([^"]*)"|(\S+)', pattern)]


def _position_token(row: LogEvent) -> str:
    place = keyset.to_json([row.time, row.id])
    return base64.urlsafe_b64encode(json.dumps(place).encode()).decode()


def _position(token: str | None) -> list[Any] | None:
    if token is None:
        return None
    try:
        place = keyset.from_json(_FILTER_KEYS, json.loads(base64.urlsafe_b64decode(token)))
    except (ValueError, TypeError, binascii.Error):
        place = None
    if place is None:
        raise _invalid("The specified nextToken is invalid.")
    return place


def _streams(call: Call, job_prefix: str, *, exact: bool) -> list[Stream]:
    principal = call.principal
    principal.require(Role.VIEWER, principal.project, "reading logs")
    # The jobs' columns a stream shows, never their records.
    query = (
        select(
            TrainingJob.id,
            TrainingJob.name,
            TrainingJob.project,
            TrainingJob.created_at,
            LogEvent.host,
            func.min(LogEvent.time).label("first"),
            func.max(LogEvent.time).label("last"),
            func.count(LogEvent.id).label("lines"),
        )
        .join(LogEvent, LogEvent.job_id == TrainingJob.id)
        .where(TrainingJob.project == principal.project)
        .group_by(TrainingJob.id, LogEvent.host)
    )
    if exact:
        query = query.where(TrainingJob.name == job_prefix)
    elif job_prefix:
        query = query.where(TrainingJob.name.startswith(job_prefix, autoescape=True))
    return [
        Stream(job=row, host=row.host, first=row.first, last=row.last, lines=row.lines)
        for row in call.session.execute(query)
    ]


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


def _within(query: Any, start_ms: int | None, end_ms: int | None) -> Any:
    if start_ms is not None:
        query = query.where(LogEvent.time >= _from_ms(start_ms))
    if end_ms is not None:
        query = query.where(LogEvent.time < _from_ms(end_ms))
    return query


def _from_ms(ms: int) -> datetime:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        raise _invalid("A time is out of range.") from None


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def _event(row: LogEvent) -> dict[str, Any]:
    # Runyard keeps when the instance printed a line, not when it arrived: both are that.
    return {"timestamp": _ms(row.time), "message": row.message, "ingestionTime": _ms(row.time)}


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


def _offset(token: str | None) -> int:
    if token is None:
        return 0
    try:
        offset = json.loads(base64.urlsafe_b64decode(token.encode()))["offset"]
        if isinstance(offset, int) and offset >= 0:
            return offset
    except (ValueError, KeyError, TypeError, binascii.Error):
        pass
    raise _invalid("The specified nextToken is invalid.")


def _offset_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _invalid(message: str) -> AwsError:
    return AwsError("InvalidParameterException", message)


OPERATIONS: dict[str, Operation] = {
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
