"""Object keys in a tier, and a tier's listing grouped into segments.

Aiven's plugin (its ObjectKeyFactory) stores every segment as three objects::

    <prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.<suffix>

with suffix ``log``, ``indexes`` and ``rsm-manifest``; the topic and segment ids are Kafka
UUIDs as Kafka prints them (22 characters of URL-safe base64) and ``<prefix>`` is the plugin's
``key.prefix`` setting, any string (often ending in ``/``). The part after the prefix is the
*main path*. The plugin also gives Kafka custom metadata for each segment, stored in
``__remote_log_metadata`` (:mod:`kafkalog.internal.remote_log`): where it holds
``object_prefix`` and ``object_key``, the plugin reads the ``.log`` and ``.indexes`` at
``<object_prefix><object_key>.<suffix>`` (the prefix as it was at upload time) rather than at
the current prefix: :func:`object_key` does the same.

Simpler plugins copy a segment's files as they are, which reads as an ordinary partition
folder: mgoblin/minio-rsm writes ``/<topic>-<partition>/<20-digit start offset>.log`` (and
``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``,
``<20-digit>-leader-epoch-checkpoint``), and a copy of a broker's folder looks the same. Both
are listed here as ``plain`` segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOG = ".log"
INDEXES = ".indexes"
MANIFEST = ".rsm-manifest"
#: the plugin's three objects of a segment
AIVEN_SUFFIXES = (LOG, INDEXES, MANIFEST)
AIVEN = "aiven"
PLAIN = "plain"

_TOPIC = r"(?P<topic>[A-Za-z0-9._-]{1,249})"
_UUID = r"[A-Za-z0-9_-]{22}"
#: a main path and suffix, after any folders
AIVEN_KEY = re.compile(
    r"(?P<folders>(?:.*/)?)" + _TOPIC + r"-(?P<topic_id>" + _UUID + r")/(?P<partition>\d+)/"
    r"(?P<offset>\d{20})-(?P<segment_id>" + _UUID + r")(?P<suffix>\.log|\.indexes|\.rsm-manifest)")
#: a partition folder's segment file and the files beside it with the same offset
PLAIN_KEY = re.compile(
    r"(?P<folders>(?:.*/)?)" + _TOPIC + r"-(?P<partition>\d+)/(?P<offset>\d{20})"
    r"(?P<suffix>\.log|\.index|\.timeindex|\.txnindex|\.snapshot|-leader-epoch-checkpoint)")


def main_path(topic: str, topic_id: str, partition: int, start_offset: int,
              segment_id: str) -> str:
    """The plugin's main path of a segment (ObjectKeyFactory.mainPath)."""
    return f"{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_id}"


def object_key(prefix: str, main: str, suffix: str, custom: dict | None = None) -> str:
    """The key of one of a segment's objects, as the plugin finds it: ``custom`` (decoded
    custom metadata) overrides the prefix and the main path where it holds them."""
    custom = custom or {}
    prefix = custom.get("object_prefix", prefix)
    main = custom.get("object_key", main)
    return f"{prefix}{main}{suffix}"


def sibling(key: str, suffix: str) -> str:
    """The key of the segment's object with ``suffix`` beside the object ``key``
    (``…-<segmentId>.rsm-manifest`` -> ``…-<segmentId>.log``)."""
    for own in AIVEN_SUFFIXES:
        if key.endswith(own):
            return key[:-len(own)] + suffix
    raise ValueError(f"{key}: not a .log, .indexes or .rsm-manifest key")


@dataclass(frozen=True, slots=True)
class TierSegment:
    """One segment found in a listing."""

    layout: str  # AIVEN or PLAIN
    topic: str
    partition: int
    start_offset: int
    base: str  # its objects' key without the suffix
    topic_id: str | None = None  # AIVEN only
    segment_id: str | None = None  # AIVEN only
    objects: dict = field(default_factory=dict)  # suffix -> size in bytes

    @property
    def complete(self) -> bool:
        """All three objects of an Aiven segment, or a plain segment's ``.log``, are there."""
        need = AIVEN_SUFFIXES if self.layout == AIVEN else (LOG,)
        return all(s in self.objects for s in need)


def parse_key(key: str):
    """``(layout, match)`` for a segment object's key, else None."""
    m = AIVEN_KEY.fullmatch(key)
    if m is not None:
        return AIVEN, m
    m = PLAIN_KEY.fullmatch(key)
    if m is not None:
        return PLAIN, m
    return None


def group_segments(listing) -> tuple[list[TierSegment], int]:
    """A listing's ``(key, size)`` pairs as segments, sorted by topic, partition and start
    offset, and the number of objects that belong to none. A plain group without a
    ``.log`` (an index alone) is not a segment."""
    groups: dict = {}
    other = 0
    for key, size in listing:
        found = parse_key(key)
        if found is None:
            other += 1
            continue
        layout, m = found
        base = key[:-len(m["suffix"])]
        seg = groups.get(base)
        if seg is None:
            seg = groups[base] = TierSegment(
                layout, m["topic"], int(m["partition"]), int(m["offset"]), base,
                m["topic_id"] if layout == AIVEN else None,
                m["segment_id"] if layout == AIVEN else None)
        seg.objects[m["suffix"]] = size
    out = []
    for seg in groups.values():
        if seg.layout == PLAIN and LOG not in seg.objects:
            other += len(seg.objects)
            continue
        out.append(seg)
    out.sort(key=lambda s: (s.topic, s.partition, s.start_offset, s.segment_id or "", s.base))
    return out, other
