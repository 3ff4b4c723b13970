"""Input channels into ``input/data/<channel>/``, whole or as this host's shard.

``FullyReplicated`` gives every host everything. ``ShardedByS3Key`` (for ``s3://`` and
``file://`` alike) lists the objects under the channel's URI, sorted by key, and gives
object ``i`` to the host at position ``i mod N`` in the sorted host list (algo-1 ..
algo-N): every object reaches exactly one host, and every host computes the same split
without talking to the others.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime import storage
from runtime.config import InstanceConfig

FULLY_REPLICATED = "FullyReplicated"
SHARDED_BY_KEY = "ShardedByS3Key"


class ChannelError(Exception):
    """A channel asks for something this runtime cannot do."""


def fetch_all(config: InstanceConfig, say: Callable[[str], None]) -> None:
    for name, uri in sorted(config.channels.items()):
        shard = shard_of(config, name)
        if shard is None:
            say(f"Fetching channel {name} from {uri}")
        else:
            say(f"Fetching channel {name} from {uri}: shard {shard[0] + 1} of {shard[1]}")
        storage.fetch(uri, config.paths.data / name, shard=shard)


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
