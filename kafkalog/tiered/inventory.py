"""A tier's inventory: which segments are live, where their objects are, and which listed
segment is which (pure functions; no store is read here).

The three facts every reader of a tier needs, in one place (the decode job's tier input,
``spark_jobs.decode.tier``; the ``remote_segments`` table, ``spark_jobs.derive.remote``; the
tier audit, ``spark_jobs.audit.tier``):

- **The live set** (:func:`replay`): ``__remote_log_metadata``'s events replayed as Kafka's
  RemoteLogMetadataCache does (:mod:`kafkalog.internal.remote_log`), each metadata partition
  in offset order and each offset once (several nights or brokers may hold the same records:
  :func:`once_in_order`); a segment is live (:func:`is_live`) when its last state is
  COPY_SEGMENT_FINISHED and its topic partition is not being deleted.
- **The object keys** (:func:`segment_keys`): a segment's ``.log``, ``.indexes`` and
  ``.rsm-manifest`` keys as Aiven's plugin derives them (ObjectKeyFactory), the custom
  metadata's ``object_prefix``/``object_key`` overriding the tier's prefix and the main path
  (:func:`.layout.object_key`).
- **The listing's matches** (:func:`listing`, :func:`index_listing`/:func:`find_listed`,
  :func:`index_rows`/:func:`find_row`): a listing's objects grouped into segments, and a
  metadata row's listed segment or a listed segment's row, by segment id (Aiven's keys carry
  it) or, for a plain copy (minio-rsm: no id in its name), by topic, partition and start
  offset.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..internal.remote_log import LIVE, segment_rows
from .layout import AIVEN_SUFFIXES, PLAIN, TierSegment, group_segments, main_path, object_key

#: the metadata row fields of the plugin's custom metadata that move a segment's objects
CUSTOM_KEY_FIELDS = ("object_prefix", "object_key")


def once_in_order(items: Iterable, place: Callable) -> list:
    """``items`` sorted by ``place(item)`` (a metadata partition and offset), each place once:
    the first item seen at it is kept (copies of one record from several nights or brokers)."""
    out, seen = [], set()
    for item in sorted(items, key=place):
        at = place(item)
        if at not in seen:
            seen.add(at)
            out.append(item)
    return out


def is_live(row: dict) -> bool:
    """A :func:`~kafkalog.internal.remote_log.segment_rows` row a reader of the tier may use:
    its last state COPY_SEGMENT_FINISHED, its topic partition not marked for deletion."""
    return row["state"] == LIVE and row["partition_delete_state"] is None


def replay(events: Iterable) -> list[dict]:
    """The live segments' rows after ``events`` (:class:`~kafkalog.internal.remote_log.
    MetadataEvent`, of any number of metadata segments, copies included), replayed in
    (metadata partition, offset) order, each offset once."""
    ordered = once_in_order(events, lambda e: (e.metadata_partition, e.offset))
    return [r for r in segment_rows(ordered) if is_live(r)]


def segment_keys(row: dict, prefix: str = "") -> dict[str, str]:
    """suffix -> key of each of a segment's three objects (``.log``, ``.indexes``,
    ``.rsm-manifest``) as the plugin finds them: at the tier's ``prefix`` and the segment's
    main path, unless the row's custom metadata names either."""
    main = main_path(row["topic"], row["topic_id"], row["partition"], row["start_offset"],
                     row["segment_id"])
    custom = {k: row[k] for k in CUSTOM_KEY_FIELDS if row.get(k) is not None}
    return {suffix: object_key(prefix, main, suffix, custom) for suffix in AIVEN_SUFFIXES}


def has_custom_keys(row: dict) -> bool:
    """The row's custom metadata names a prefix or a main path of its own."""
    return any(row.get(k) is not None for k in CUSTOM_KEY_FIELDS)


def listing(pairs: Iterable[tuple[str, int]]) -> tuple[list[TierSegment], set[str]]:
    """A listing's ``(key, size)`` pairs as its segments (:func:`.layout.group_segments`) and
    the set of every listed key."""
    pairs = list(pairs)
    segments, _ = group_segments(pairs)
    return segments, {k for k, _ in pairs}


def _offset_place(x) -> tuple:
    if isinstance(x, dict):
        return x["topic"], x["partition"], x["start_offset"]
    return x.topic, x.partition, x.start_offset


def index_listing(listed: Iterable[TierSegment]) -> tuple[dict, dict]:
    """``(by segment id, by (topic, partition, start offset))`` of listed segments, the
    second of plain copies only (:func:`find_listed`)."""
    listed = list(listed)
    by_id = {s.segment_id: s for s in listed if s.segment_id}
    by_offset = {_offset_place(s): s for s in listed if s.layout == PLAIN}
    return by_id, by_offset


def find_listed(row: dict, index: tuple[dict, dict]) -> TierSegment | None:
    """The listed segment of a metadata row: by its segment id, else a plain copy at its
    start offset (``index``: :func:`index_listing`)."""
    by_id, by_offset = index
    return by_id.get(row["segment_id"]) or by_offset.get(_offset_place(row))


def index_rows(rows: Iterable[dict]) -> tuple[dict, dict]:
    """``(by segment id, by (topic, partition, start offset))`` of metadata rows
    (:func:`find_row`); of several rows at one start offset, the last."""
    rows = list(rows)
    return ({r["segment_id"]: r for r in rows}, {_offset_place(r): r for r in rows})


def find_row(segment: TierSegment, index: tuple[dict, dict]) -> dict | None:
    """The metadata row of a listed segment: by its segment id (Aiven's keys), else, a plain
    copy having none, by its start offset (``index``: :func:`index_rows`)."""
    by_id, by_offset = index
    if segment.segment_id:
        return by_id.get(segment.segment_id)
    return by_offset.get(_offset_place(segment))


__all__ = ["CUSTOM_KEY_FIELDS", "find_listed", "find_row", "has_custom_keys", "index_listing",
           "index_rows", "is_live", "listing", "once_in_order", "replay", "segment_keys"]
