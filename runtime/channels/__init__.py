"""Input channels into ``input/data/<channel>/``, whole or as this host's shard.

``FullyReplicated`` gives every host everything. ``ShardedByS3Key`` (for ``s3://`` and
``file://`` alike) lists the objects under the channel's URI, sorted by key, and gives
object ``i`` to the host at position ``i mod N`` in the sorted host list (algo-1 ..
algo-N): every object reaches exactly one host, and every host computes the same split
without talking to the others. A ``ManifestFile`` channel's objects are the manifest's
entries (``runtime.channels.manifest``), split the same way in key order.

``TrainingInputMode`` decides how the objects reach the script: ``File`` downloads them
before it starts (logging how far it is), ``FastFile`` mounts the channel and fetches each
file when it is first opened (``runtime.channels.fastfile``; File mode where FUSE cannot
be mounted), ``Pipe`` streams them into FIFOs (``runtime.channels.pipe``).
``CompressionType: Gzip`` gunzips every object on the way in every mode
(``runtime.channels.channel_data``). What is listed is listed before the script starts,
so a missing prefix or object fails the job there, as SageMaker's download does: the
service accepts a channel whose prefix holds nothing, and its instances fail the job with
``Data download failed: channel <name>: ...``, naming the URI.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contract import storage
from contract.instance_config import InstanceConfig
from runtime.channels import channel_data, fastfile, manifest, pipe
from runtime.channels.channel_data import ChannelError as ChannelError  # raised by every mode
from runtime.channels.channel_data import ChannelObject

FULLY_REPLICATED = "FullyReplicated"
SHARDED_BY_KEY = "ShardedByS3Key"
FILE, PIPE, FASTFILE = "File", "Pipe", "FastFile"
S3_PREFIX, MANIFEST_FILE = "S3Prefix", "ManifestFile"
# How many objects are fetched at once, for File mode and a manifest's sizes: enough to
# keep a link to S3 busy with small objects, few enough for a small instance.
PARALLEL_FETCHES = 8
# The longest a File-mode download goes without a progress line.
PROGRESS_INTERVAL = 5.0
# Where FastFile keeps what it fetched, beside (never inside) input/data/.
FASTFILE_CACHE = ".fastfile"


@dataclass(frozen=True)
class Channel:
    """One channel as inputdataconfig.json describes it."""

    name: str
    uri: str
    mode: str
    data_type: str
    # (this host's position, number of hosts) where the channel is split; None if not.
    shard: tuple[int, int] | None
    gzip: bool


class _Serving(Protocol):
    """A channel that keeps serving while the script runs (Pipe, FastFile)."""

    @property
    def error(self) -> str | None: ...

    def stop(self) -> None: ...


class Inputs:
    """The channels still at work once the script starts; ``close`` ends them all."""

    def __init__(self) -> None:
        self._serving: list[_Serving] = []

    def add(self, channel: _Serving) -> None:
        self._serving.append(channel)

    def error(self) -> str | None:
        """The first thing a channel could not deliver (naming the object), if any."""
        return next((c.error for c in self._serving if c.error is not None), None)

    def close(self) -> None:
        """Stop every Pipe writer and unmount every FastFile channel; idempotent."""
        serving, self._serving = self._serving, []
        for channel in serving:
            channel.stop()


def open_all(
    config: InstanceConfig,
    say: Callable[[str], None],
    *,
    mount: fastfile.MountFunction = fastfile.mount_fuse,
    progress_interval: float = PROGRESS_INTERVAL,
) -> Inputs:
    """Make every channel available as its input mode says; File channels are complete
    on return, Pipe and FastFile ones serve until the returned Inputs is closed."""
    inputs = Inputs()
    try:
        for name in sorted(config.spec.channel_uris):
            try:
                _open(config, name, inputs, say, mount, progress_interval)
            except (storage.StorageError, ChannelError) as exc:
                raise ChannelError(download_failed(name, exc)) from exc
    except BaseException:
        inputs.close()
        raise
    return inputs


def _open(
    config: InstanceConfig,
    name: str,
    inputs: Inputs,
    say: Callable[[str], None],
    mount: fastfile.MountFunction,
    progress_interval: float,
) -> None:
    channel = describe(config, name)
    shard = channel.shard
    split = "" if shard is None else f": shard {shard[0] + 1} of {shard[1]}"
    say(f"Fetching channel {name} from {channel.uri} ({channel.mode} mode){split}")
    objects = objects_of(channel)
    destination = config.paths.data / name
    if channel.mode == PIPE:
        inputs.add(pipe.PipeChannel(name, objects, config.paths.data, say).start())
        return
    if channel.mode == FASTFILE:
        cache = config.paths.input / FASTFILE_CACHE / name
        served = fastfile.serve(name, objects, destination, cache, say, mount=mount)
        if served is not None:
            inputs.add(served)
            say(f"Channel {name}: {len(objects)} files mounted at {destination}")
            return
    download(name, objects, destination, say, progress_interval)


def download_failed(name: str, exc: Exception) -> str:
    """Why a channel could not be made available, in the words SageMaker's failure reasons
    use (``Data download failed:``), naming the channel once."""
    detail = str(exc).removeprefix(f"channel {name}: ")
    return f"Data download failed: channel {name}: {detail}"


def describe(config: InstanceConfig, name: str) -> Channel:
    entry = config.input_data_config.get(name, {})
    mode = entry.get("TrainingInputMode", FILE)
    data_type = entry.get("S3DataType", S3_PREFIX)
    compression = entry.get("CompressionType", "None")
    for key, value, known in (
        ("TrainingInputMode", mode, (FILE, PIPE, FASTFILE)),
        ("S3DataType", data_type, (S3_PREFIX, MANIFEST_FILE)),
        ("CompressionType", compression, ("None", "Gzip")),
    ):
        if value not in known:
            raise ChannelError(f"channel {name}: unknown {key} {value!r}")
    return Channel(
        name=name,
        uri=config.spec.channel_uris[name],
        mode=mode,
        data_type=data_type,
        shard=shard_of(config, name),
        gzip=compression == "Gzip",
    )


def objects_of(channel: Channel) -> list[ChannelObject]:
    """This host's objects of the channel, in key order, each with where it lands."""
    if channel.data_type == MANIFEST_FILE:
        entries = sorted(manifest.read(channel.uri), key=lambda entry: entry.key)
        if channel.shard is not None:
            entries = entries[channel.shard[0] :: channel.shard[1]]
        # One HEAD (or stat) per object: a missing one fails here, not mid-training.
        with ThreadPoolExecutor(PARALLEL_FETCHES) as pool:
            sizes = list(pool.map(storage.size, [entry.uri for entry in entries]))
        found = [(entry.uri, entry.key, size) for entry, size in zip(entries, sizes, strict=True)]
    else:
        listed = storage.listing(channel.uri)
        if not listed and not storage.is_dir(channel.uri):
            raise storage.StorageError(_nothing_at(channel.uri))
        if channel.shard is not None:
            listed = listed[channel.shard[0] :: channel.shard[1]]
        found = [(item.uri, item.relative, item.size) for item in listed]
    objects = []
    for uri, key, size in found:
        channel_data.check_key(channel.uri, key)
        landing = channel_data.landing_key(key, channel.gzip)
        objects.append(ChannelObject(uri, landing, size, channel.gzip))
    _check_layout(channel, objects)
    return objects


def _nothing_at(uri: str) -> str:
    # An empty prefix, a mistyped one, or one the job may not list look alike on S3.
    if storage.scheme(uri) == "s3":
        bucket = uri.removeprefix("s3://").partition("/")[0]
        return (
            f"no S3 objects found under {uri}: check that objects exist under that prefix, "
            f"and that the job's credentials may list bucket {bucket!r}"
        )
    return f"{uri}: no such file or directory"


def _check_layout(channel: Channel, objects: list[ChannelObject]) -> None:
    """Refuses objects that cannot all land: two at one path (``a`` and a gunzipped
    ``a.gz``), or one where another needs a directory (``a`` and ``a/b``)."""
    files: dict[str, str] = {}
    for item in objects:
        if item.key in files:
            raise ChannelError(
                f"channel {channel.name}: {files[item.key]} and {item.uri} "
                f"would both land at {item.key!r}"
            )
        files[item.key] = item.uri
    for item in objects:
        parts = item.key.split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory in files:
                raise ChannelError(
                    f"channel {channel.name}: {files[directory]} lands at {directory!r}, "
                    f"where {item.uri} needs a directory"
                )


def download(
    name: str,
    objects: list[ChannelObject],
    destination: Path,
    say: Callable[[str], None],
    progress_interval: float = PROGRESS_INTERVAL,
) -> None:
    """File mode: every object into ``destination``, a few at a time, saying how far."""
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. a Pipe channel's FIFO already at that path
        raise ChannelError(
            f"channel {name}: cannot make its directory {destination} ({exc.strerror or exc})"
        ) from exc
    total = sum(item.size for item in objects)
    progress = Progress(name, len(objects), total, say, interval=progress_interval)
    pool = ThreadPoolExecutor(PARALLEL_FETCHES, thread_name_prefix=f"fetch-{name}")
    try:
        futures = [
            pool.submit(channel_data.land, item, destination / item.key, progress.add_bytes)
            for item in objects
        ]
        for future in as_completed(futures):
            future.result()  # the first failure fails the channel
            progress.add_object()
    finally:
        # On a failure, what has not started never starts; what has, finishes first.
        pool.shutdown(wait=True, cancel_futures=True)
    progress.finish()


class Progress:
    """``Channel train: 120/500 objects, 1.2 GB of 4.8 GB (25%)``, at most every
    ``interval`` seconds, and a last line with the time it all took. Byte counts arrive
    from the transfer threads, hence the lock."""

    def __init__(
        self,
        name: str,
        objects: int,
        total_bytes: int,
        say: Callable[[str], None],
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.objects = objects
        self.total_bytes = total_bytes
        self.say = say
        self.interval = interval
        self.clock = clock
        self.done_objects = 0
        self.done_bytes = 0
        self._started = self._said = clock()
        self._lock = threading.Lock()

    def add_bytes(self, count: int) -> None:
        with self._lock:
            self.done_bytes += count
            self._maybe_say()

    def add_object(self) -> None:
        with self._lock:
            self.done_objects += 1
            self._maybe_say()

    def finish(self) -> None:
        elapsed = self.clock() - self._started
        self.say(
            f"Channel {self.name}: {self.objects} objects, {human_bytes(self.total_bytes)} "
            f"in {elapsed:.1f} s"
        )

    def _maybe_say(self) -> None:
        now = self.clock()
        if now - self._said < self.interval:
            return
        self._said = now
        # A gunzipped object may count more than its stored size by a last chunk.
        percent = min(100, 100 * self.done_bytes // self.total_bytes) if self.total_bytes else 0
        self.say(
            f"Channel {self.name}: {self.done_objects}/{self.objects} objects, "
            f"{human_bytes(self.done_bytes)} of {human_bytes(self.total_bytes)} ({percent}%)"
        )


def human_bytes(count: int) -> str:
    """Decimal units, as S3 consoles and the AWS CLI show sizes: 1.2 GB."""
    if count < 1000:
        return f"{count} B"
    size = float(count)
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1000
        if size < 1000:
            return f"{size:.1f} {unit}"
    return f"{size / 1000:.1f} PB"


def shard_of(config: InstanceConfig, name: str) -> tuple[int, int] | None:
    """``(this host's position, number of hosts)`` for a sharded channel; None for a
    replicated one."""
    entry = config.input_data_config.get(name, {})
    distribution = entry.get("S3DistributionType", FULLY_REPLICATED)
    if distribution == FULLY_REPLICATED:
        return None
    if distribution != SHARDED_BY_KEY:
        raise ChannelError(f"channel {name}: unknown S3DistributionType {distribution!r}")
    return config.node_rank, len(config.hosts)
