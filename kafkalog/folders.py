"""The names of a broker log directory's partition folders (Kafka's ``LocalLog``).

A partition's folder is ``<topic>-<partition>``. Kafka renames it in three cases, each
name ``<topic>-<partition>.<unique id><suffix>`` where the unique id is a random UUID
without its dashes (32 lower-case hex digits: ``logDirNameWithSuffix``):

``-delete``
    the partition was deleted; the folder waits for asynchronous removal
    (``logDeleteDirName``);
``-future``
    a replica being moved here from another log directory of the same broker
    (``ALTER_REPLICA_LOG_DIRS``; ``logFutureDirName``), renamed to the plain name when it
    has caught up;
``-stray``
    a partition this broker holds but the cluster metadata no longer assigns to it
    (KRaft; ``logStrayDirName``).

For ``-delete`` and ``-stray`` Kafka cuts the topic so that the whole name fits in 255
characters (``logDirNameWithSuffixCappedLength``): from such a name the topic may be a
prefix of the real one. Kafka's parser (``parseTopicPartitionName``) takes the part before
the last ``.`` of a renamed folder and splits it at its last ``-``; here the topic must
also be a legal one (``Topic.validate``: ``[A-Za-z0-9._-]``, 1-249 characters, not ``.``
or ``..``) and the unique id 32 hex digits, as Kafka writes them.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

LIVE, DELETE, FUTURE, STRAY = "live", "delete", "future", "stray"
#: Kafka's folder suffixes (LocalLog.DeleteDirSuffix, FutureDirSuffix, StrayDirSuffix)
FOLDER_SUFFIXES = {"-delete": DELETE, "-future": FUTURE, "-stray": STRAY}
_FOLDER = re.compile(r"(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>[0-9]+)"
                     r"(?:\.(?P<unique>[0-9a-f]{32})(?P<suffix>-delete|-future|-stray))?")
_MAX_PARTITION = (1 << 31) - 1


class PartitionFolder(NamedTuple):
    topic: str  # for DELETE and STRAY names of 255 characters, perhaps cut short by Kafka
    partition: int
    state: str  # LIVE, DELETE, FUTURE or STRAY


def parse_partition_folder(name: str) -> PartitionFolder | None:
    """``(topic, partition, state)`` of a partition folder's name (or of the last component
    of a path, key or URI): ``orders-3`` is ``("orders", 3, "live")``,
    ``orders-3.<32 hex digits>-delete`` is ``("orders", 3, "delete")``; None for any other
    name."""
    m = _FOLDER.fullmatch(os.path.basename(name.rstrip("/")))
    if m is None or m["topic"] in (".", "..") or int(m["partition"]) > _MAX_PARTITION:
        return None
    state = FOLDER_SUFFIXES[m["suffix"]] if m["suffix"] else LIVE
    return PartitionFolder(m["topic"], int(m["partition"]), state)
