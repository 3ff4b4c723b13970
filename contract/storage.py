"""Where code, data and artifacts live, addressed by URI: ``file://`` and ``s3://``.

Every caller goes through these functions, so a scheme is one more branch here, not a
change at each call site. boto3 is imported only when an ``s3://`` URI is used: the runtime
stays standard-library-only for ``file://`` users.

S3 is reached the way the AWS CLI reaches it: credentials from boto3's own chain
(environment, shared files, a container credentials endpoint, instance profile), and the
endpoint from ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``, which boto3 reads itself.
An ``s3://`` URI names an object or, as a directory would, the objects under ``<key>/``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote_from_bytes, unquote_to_bytes, urlsplit

from contract import file_confinement, variables

SUPPORTED_SCHEMES = ("file", "s3")
# Where S3 is and in which region: what an instance is told of it by the machine that
# starts it. Credentials are not among them: an instance gets the job's own
# (``contract.variables.CONTAINER_CREDENTIALS_URI``), never the server's.
S3_ENDPOINT_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
# What decides which S3 client a process gets; a change (tests point at another server,
# the runtime starts relaying the job's credentials) gets a new client, not a stale one.
S3_CLIENT_ENV = (
    *S3_ENDPOINT_ENV,
    *variables.AWS_KEY_VARIABLES,
    *variables.AWS_FILE_VARIABLES,
    variables.CONTAINER_CREDENTIALS_URI,
    variables.CONTAINER_AUTHORIZATION,
)

# How much of an object is held in memory at a time when it is streamed.
CHUNK_SIZE = 1 << 20
# How put_file's temporary copies end (``.<name>.<random>.runyard-partial``): an upload
# killed mid-copy leaves one behind, which listing, fetching and restoring must not take
# for data. Distinct enough that no dataset's or script's own file ends so.
PARTIAL_SUFFIX = ".runyard-partial"


class StorageError(Exception):
    """A URI is malformed, unsupported or unreadable; the message names it."""


@dataclass(frozen=True)
class StoredObject:
    """One object under a listed URI; ``relative`` is its path below that URI."""

    uri: str
    relative: str
    size: int


def scheme(uri: str) -> str:
    """The URI's scheme, if this build supports it."""
    found = urlsplit(uri).scheme
    if found not in SUPPORTED_SCHEMES:
        supported = ", ".join(f"{name}://" for name in SUPPORTED_SCHEMES)
        raise StorageError(f"{uri!r}: unsupported scheme (this server supports {supported})")
    return found


# Kept: a submission's rules ask for the paths of the same few URIs a dozen times, and
# parsing each cost more than the rest of a rule. A URI refused is not kept.
@functools.lru_cache(maxsize=4096)
def local_path(uri: str) -> Path:
    """The absolute path a ``file://`` URI names (percent-escapes decoded as the bytes of
    a file name, so any name the file system holds round-trips)."""
    if scheme(uri) != "file":
        raise StorageError(f"{uri!r}: not a file:// URI")
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise StorageError(f"{uri!r}: file URIs must not name a host")
    if "?" in uri or "#" in uri:
        # Read as a query or fragment, the rest of the name would be dropped silently.
        raise StorageError(f"{uri!r}: file URIs must write '?' as %3F and '#' as %23")
    path = os.fsdecode(unquote_to_bytes(parts.path))
    if not path.startswith("/"):
        raise StorageError(f"{uri!r}: file URIs must hold an absolute path (file:///...)")
    return Path(path)


def join(uri: str, *parts: str) -> str:
    """``uri`` with the path ``parts`` below it. In a ``file://`` URI each part is
    percent-encoded (a file named ``a#1`` stays that file) and must stay below ``uri``."""
    joined = "/".join([uri.rstrip("/"), *(_encoded(uri, part.strip("/")) for part in parts)])
    if scheme(uri) == "file":
        _check_inside(joined, local_path(uri))
    return joined


def model_uri(output_path: str, job_name: str, compression: str = "GZIP") -> str:
    """Where a job's model is stored, laid out as SageMaker lays out a job's outputs: its
    ``model.tar.gz``, or with ``compression`` "NONE" the prefix its files are under (a
    trailing slash, as SageMaker's S3ModelArtifacts then gives)."""
    if compression == "NONE":
        return join(output_path, job_name, "output", "model") + "/"
    return join(output_path, job_name, "output", "model.tar.gz")


def output_data_uri(output_path: str, job_name: str) -> str:
    """Where what a job's script wrote to SM_OUTPUT_DATA_DIR is stored, beside its model."""
    return join(output_path, job_name, "output", "output.tar.gz")


def concat(prefix: str, key: str) -> str:
    """``prefix`` and ``key`` joined as strings, the way SageMaker joins a manifest's
    prefix and keys (``s3://b/part-`` and ``0001``); ``key`` encoded as ``join`` does."""
    joined = prefix + _encoded(prefix, key)
    if scheme(prefix) == "file":
        base = local_path(prefix)
        _check_inside(joined, base if prefix.endswith("/") else base.parent)
    return joined


def _encoded(uri: str, part: str) -> str:
    if scheme(uri) != "file":
        return part  # S3 keys are the names themselves
    return quote_from_bytes(os.fsencode(part), safe="/")


def _check_inside(uri: str, base: Path) -> None:
    # Lexically: a name that only looks like ".." once decoded is now encoded, so
    # what remains is a real "." or ".." part.
    # As strings: each create joins a few URIs, and pathlib's parsing cost more than the
    # rest of the join.
    if not file_confinement.inside(os.path.normpath(local_path(uri)), os.path.normpath(base)):
        raise StorageError(f"{uri}: refused: its path leaves {base}")


def check_form(uri: str) -> None:
    """Refuse a URI that names no place at all (an unsupported scheme, a relative
    ``file://`` path, an ``s3://`` URI without a bucket), looking at nothing it names."""
    if scheme(uri) == "s3":
        _S3(uri)
    else:
        local_path(uri)


def is_partial(name: str) -> bool:
    """Whether a file name is one of put_file's temporary copies."""
    return name.startswith(".") and name.endswith(PARTIAL_SUFFIX)


def exists(uri: str) -> bool:
    """Whether ``uri`` names a file/object or a directory/prefix with objects under it."""
    if scheme(uri) == "s3":
        return _S3(uri).object_size() is not None or _S3(uri).has_children()
    return local_path(uri).exists()


def is_dir(uri: str) -> bool:
    if scheme(uri) == "s3":
        return _S3(uri).has_children()
    return local_path(uri).is_dir()


def is_file(uri: str) -> bool:
    if scheme(uri) == "s3":
        return _S3(uri).object_size() is not None
    return local_path(uri).is_file()


def put_file(source: Path, uri: str) -> None:
    """Copy ``source`` to ``uri`` so that readers never see a half-written object."""
    if scheme(uri) == "s3":
        _S3(uri).upload(source)  # an S3 object appears whole or not at all
        return
    target = local_path(uri)
    with _local(uri), file_confinement.directory_for_writing(target.parent) as parent:
        fd, tmp_name = tempfile.mkstemp(
            dir=parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX
        )
        os.close(fd)
        try:
            shutil.copyfile(source, tmp_name)
            os.replace(tmp_name, parent / target.name)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise


def list_objects(uri: str) -> list[tuple[str, int]]:
    """``(uri, size)`` of every object ``uri`` names: itself if it is one, else every one
    under it (regular files, for ``file://``), sorted by their path below ``uri``."""
    return [(item.uri, item.size) for item in _listing(uri)]


def listing(uri: str) -> list[StoredObject]:
    """As ``list_objects``, keeping each object's path below ``uri``."""
    return _listing(uri)


def size(uri: str) -> int:
    """The size of the single object or regular file ``uri`` names."""
    if scheme(uri) == "s3":
        found = _S3(uri).object_size()
        if found is None:
            raise StorageError(f"{uri}: no such object")
        return found
    try:
        with _local(uri), file_confinement.pinned(local_path(uri)) as path:
            if not path.is_file():
                raise StorageError(f"{uri}: no such file")
            return path.stat().st_size
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc


def modified(uri: str) -> datetime:
    """When the single object or regular file ``uri`` names was last written (UTC)."""
    if scheme(uri) == "s3":
        return _S3(uri).last_modified()
    try:
        with _local(uri), file_confinement.pinned(local_path(uri)) as path:
            return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc


def remove(uri: str) -> None:
    """Delete the single object or regular file ``uri`` names; none there is no error."""
    if scheme(uri) == "s3":
        _S3(uri).delete()
        return
    path = local_path(uri)
    try:
        with (
            _local(uri),
            file_confinement.pinned(path.parent, directory=True, writing=True) as parent,
        ):
            (parent / path.name).unlink(missing_ok=True)
    except FileNotFoundError:
        return  # no directory, no file
    except OSError as exc:
        raise StorageError(f"{uri}: cannot delete ({exc.strerror or exc})") from exc


def read_chunks(uri: str, chunk_size: int = CHUNK_SIZE) -> Generator[bytes, None, None]:
    """The bytes of one object, a chunk at a time, without landing it on disk (Pipe mode
    streams what it reads straight into a FIFO); closing it early reads no more."""
    if scheme(uri) == "s3":
        yield from _S3(uri).chunks(chunk_size)
        return
    try:
        with (
            _local(uri),
            file_confinement.pinned(local_path(uri)) as path,
            path.open("rb") as source,
        ):
            while chunk := source.read(chunk_size):
                yield chunk
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc


def read_bytes(uri: str, limit: int) -> bytes:
    """A small object whole (a manifest); refuses one larger than ``limit`` bytes."""
    data = bytearray()
    for chunk in read_chunks(uri):
        data += chunk
        if len(data) > limit:
            raise StorageError(f"{uri}: larger than {limit} bytes")
    return bytes(data)


def fetch(uri: str, destination: Path, shard: tuple[int, int] | None = None) -> Path:
    """Copy what ``uri`` names into the directory ``destination``.

    A directory's (prefix's) contents land directly in ``destination``, each object at its
    path below ``uri``; a single file lands inside it under its own name. With ``shard =
    (index, count)`` only the objects whose position in the sorted listing is ``index``
    modulo ``count`` are copied. Returns the path of what was fetched.
    """
    if scheme(uri) == "file" and shard is None:
        return _fetch_local_tree(uri, destination)
    objects = _listing(uri)
    if not objects and not is_dir(uri):
        raise StorageError(f"{uri}: no such file, object or prefix")
    if shard is not None:
        index, count = shard
        objects = objects[index::count]
    destination.mkdir(parents=True, exist_ok=True)
    # Every target is checked before anything is written: a hostile key refuses the whole.
    targets = [(item, _target(uri, destination, item.relative)) for item in objects]
    for item, target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_object(item.uri, target)
    if len(targets) == 1 and targets[0][0].uri == uri:
        return targets[0][1]
    return destination


def _listing(uri: str) -> list[StoredObject]:
    if scheme(uri) == "s3":
        return _S3(uri).listing()
    root = local_path(uri)
    try:
        if root.is_file():
            return [StoredObject(uri, root.name, size(uri))]
        if not root.is_dir():
            raise StorageError(f"{uri}: no such file or directory")
        found = []
        with _local(uri), file_confinement.pinned(root, directory=True) as walked:
            for directory, _dirs, names in os.walk(walked):
                for name in names:
                    path = Path(directory, name)
                    # A link to a file is that file (a dataset of links into a shared
                    # store arrives whole); links to nothing, or to a directory, are not
                    # objects. Each is checked again where it is read (confined).
                    if path.is_file() and not is_partial(name):
                        relative = path.relative_to(walked)
                        item = StoredObject(
                            (root / relative).as_uri(), relative.as_posix(), path.stat().st_size
                        )
                        found.append(item)
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc
    return sorted(found, key=lambda item: item.relative)


def _target(uri: str, destination: Path, relative: str) -> Path:
    """Where an object lands; refuses a key that would land outside ``destination``."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise StorageError(f"{uri}: refused object {relative!r}: its path leaves the target")
    return destination.joinpath(*parts)


def copy_object(uri: str, target: Path, on_bytes: Callable[[int], None] | None = None) -> None:
    """Copy one object to the file ``target``; ``on_bytes`` hears of every chunk copied
    (from the transfer's own threads, for s3://)."""
    if scheme(uri) == "s3":
        _S3(uri).download(target, on_bytes)
        return
    try:
        if on_bytes is None:
            with _local(uri), file_confinement.pinned(local_path(uri)) as path:
                shutil.copyfile(path, target)
            return
        with target.open("wb") as output:
            for chunk in read_chunks(uri):
                output.write(chunk)
                on_bytes(len(chunk))
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc


def _fetch_local_tree(uri: str, destination: Path) -> Path:
    named = local_path(uri)
    if not named.exists():
        raise StorageError(f"{uri}: no such file or directory")
    destination.mkdir(parents=True, exist_ok=True)
    try:
        with _local(uri), file_confinement.pinned(named) as source:
            if source.is_dir():
                if file_confinement.confined():
                    file_confinement.copy_tree(source, destination, is_partial)
                    return destination
                shutil.copytree(
                    source,
                    destination,
                    symlinks=True,
                    dirs_exist_ok=True,
                    ignore=_partial_copies,
                )
                return destination
            target = destination / named.name
            shutil.copyfile(source, target)
            return target
    except OSError as exc:
        raise StorageError(f"{uri}: cannot read ({exc.strerror or exc})") from exc


@contextlib.contextmanager
def _local(uri: str) -> Iterator[None]:
    """A local path that leads outside the roots, refused naming the URI (only where the
    process is confined: ``contract.file_confinement``)."""
    try:
        yield
    except file_confinement.OutsideRoots as exc:
        raise StorageError(f"{uri}: refused: {exc}") from exc


@contextlib.contextmanager
def opened_local(uri: str) -> Iterator[Path]:
    """The file a ``file://`` URI names, as a path that stays that file while the block
    runs (checked against the roots where the process is confined)."""
    with _local(uri), file_confinement.pinned(local_path(uri)) as path:
        yield path


def _partial_copies(_directory: str, names: list[str]) -> set[str]:
    return {name for name in names if is_partial(name)}


# -- s3:// -------------------------------------------------------------------------------


class _AccessDenied(StorageError):
    """The credentials do not allow the call (or S3 will not say whether the key exists)."""


class _NoSuchObject(StorageError):
    """Nothing at the key (the bucket exists)."""


class _S3:
    """One ``s3://bucket/key`` URI and the calls made on it; every AWS error becomes a
    StorageError that names the URI."""

    def __init__(self, uri: str) -> None:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise StorageError(f"{uri!r}: S3 URIs must name a bucket (s3://bucket/key)")
        self.uri = uri
        self.bucket = bucket
        self.key = key

    @property
    def prefix(self) -> str:
        # Directory semantics: s3://b/data holds data/x, never data-old/x.
        return f"{self.key.rstrip('/')}/" if self.key.strip("/") else ""

    def object_size(self) -> int | None:
        """The object's size; None if there is none at this key (a prefix is not one)."""
        if not self.key or self.key.endswith("/"):
            return None
        try:
            with self._aws_call():
                head = _s3_client().head_object(Bucket=self.bucket, Key=self.key)
        except _NoSuchObject:
            return None
        except _AccessDenied:
            # S3 answers 403, not 404, for a missing key to a caller whose listing is held
            # to prefixes (a job's own credentials): listing at the key tells the two apart.
            if self._listed_exactly():
                raise
            return None
        size: int = head["ContentLength"]
        return size

    def _listed_exactly(self) -> bool:
        with self._aws_call():
            page = _s3_client().list_objects_v2(Bucket=self.bucket, Prefix=self.key, MaxKeys=1)
        return any(item["Key"] == self.key for item in page.get("Contents", []))

    def has_children(self) -> bool:
        with self._aws_call():
            page = _s3_client().list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        return bool(page.get("KeyCount", 0))

    def listing(self) -> list[StoredObject]:
        size = self.object_size()
        if size is not None:
            return [StoredObject(self.uri, PurePosixPath(self.key).name, size)]
        found = []
        with self._aws_call():
            pages = _s3_client().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    key: str = item["Key"]
                    if key.endswith("/"):
                        continue  # a "folder" marker the S3 console makes, not data
                    relative = key[len(self.prefix) :]
                    found.append(StoredObject(f"s3://{self.bucket}/{key}", relative, item["Size"]))
        return sorted(found, key=lambda item: item.relative)

    def last_modified(self) -> datetime:
        try:
            with self._aws_call():
                head = _s3_client().head_object(Bucket=self.bucket, Key=self.key)
        except _NoSuchObject as exc:
            raise StorageError(f"{self.uri}: no such object") from exc
        when: datetime = head["LastModified"]
        return when

    def delete(self) -> None:
        with self._aws_call():
            _s3_client().delete_object(Bucket=self.bucket, Key=self.key)

    def upload(self, source: Path) -> None:
        if not self.key or self.key.endswith("/"):
            raise StorageError(f"{self.uri}: an object needs a key that does not end in '/'")
        with self._aws_call():
            _s3_client().upload_file(str(source), self.bucket, self.key)

    def download(self, target: Path, on_bytes: Callable[[int], None] | None = None) -> None:
        # download_file writes to a temporary name and renames: no half-written file stays.
        with self._aws_call():
            _s3_client().download_file(self.bucket, self.key, str(target), Callback=on_bytes)

    def chunks(self, chunk_size: int) -> Iterator[bytes]:
        # get_object's body is the HTTP response itself: read in chunks, nothing lands.
        with self._aws_call():
            body = _s3_client().get_object(Bucket=self.bucket, Key=self.key)["Body"]
            try:
                while chunk := body.read(chunk_size):
                    yield chunk
            finally:
                body.close()

    @contextlib.contextmanager
    def _aws_call(self) -> Iterator[None]:
        try:
            from boto3.exceptions import Boto3Error
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise StorageError(f"{self.uri}: s3:// needs boto3, not installed here") from exc
        try:
            yield
        except (Boto3Error, BotoCoreError, ClientError) as exc:
            raise self._error(exc) from exc

    def _error(self, exc: Exception) -> StorageError:
        # upload_file raises its own error while handling the ClientError that says why.
        cause = exc.__cause__ or exc.__context__
        code = _error_code(exc) or (_error_code(cause) if cause else "")
        if code == "NoSuchBucket":
            return StorageError(f"{self.uri}: no such bucket {self.bucket!r}")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return _AccessDenied(f"{self.uri}: access denied ({code})")
        if code in ("NoSuchKey", "404"):
            return _NoSuchObject(f"{self.uri}: no such object")
        return StorageError(f"{self.uri}: {exc}")


def _error_code(exc: BaseException) -> str:
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def _s3_client() -> Any:
    return _cached_s3_client(tuple(os.environ.get(name) for name in S3_CLIENT_ENV))


@functools.lru_cache(maxsize=4)
def _cached_s3_client(_environment: tuple[str | None, ...]) -> Any:
    import boto3

    # A fresh session reads the environment as it is now (endpoint, credentials, region).
    return boto3.session.Session().client("s3")
