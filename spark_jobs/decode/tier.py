"""The tier as a decode input (issue 34; docs/tiered.md "The job's tier input").

With ``--tiered-storage s3://bucket/prefix`` the job also reads the remote segments a
tiered-storage plugin (Aiven's) left under that prefix:

1. **The live set** (:func:`live_rows`): the input's own ``__remote_log_metadata`` segments
   are replayed on the driver (``kafkalog.tiered.inventory.replay``: COPY_SEGMENT_FINISHED,
   less deleted segments and partitions). Each metadata partition's events are read in offset
   order, each offset once (several nights or brokers may hold the same records).
2. **The objects** (:func:`discover`): each live segment's keys as the plugin derives them,
   custom metadata's ``object_prefix``/``object_key`` overriding the tier's prefix
   (``kafkalog.tiered.inventory.segment_keys``); its manifest is read, and the segment becomes a
   :class:`~spark_jobs.decode.planning.Segment` whose ``uri`` is the manifest's (the ledger's
   and the tables' ``segment``) with ``remote`` set. A live segment whose manifest cannot be
   read is a ``fetch_error`` finding naming the object; the rest go on.
3. **Splitting** (:func:`split_positions`): the ``.indexes`` object's offset index gives the
   batch positions, as a ``.index`` file does for a local segment, so a big remote segment
   is several tasks (``planning.plan``), each reading only the chunks of its byte range.
4. **Reading** (:func:`read`, on the executors): :class:`kafkalog.tiered.RemoteSegment`'s
   ranged reads, one manifest read per process and segment. Any failure of the tier (a
   missing object, a short chunk, an unknown key id, a wrong key, a GCM tag) is a
   :class:`TierReadError`, which the executor turns into a ``fetch_error`` finding and a
   ``failed`` ledger row: no row of that task is written.

Reconciliation with the local tail is :mod:`~spark_jobs.decode.replicas`' (a remote segment
is one more copy of its partition; :func:`overlapping` keeps the copies to frame small).

The key ring (:class:`TierAccess`) comes from the folder :data:`spark_jobs.layout.TIER_KEYS_ENV`
names (PKCS#8 PEM files, key id = file name without ``.pem``, as ``kafkalog tiered cat
--private-key``): read on the driver, and travelling to the executors inside the job's
context as S3 keys do, never on a command line.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from dataclasses import dataclass

import kafkalog
from kafkalog.indexes import offset_index_positions
from kafkalog.internal.remote_log import read_events
from kafkalog.tiered import KeyRing, RemoteSegment, inventory
from kafkalog.tiered.crypto import load_private_key
from kafkalog.tiered.layout import INDEXES, LOG, MANIFEST
from spark_jobs import layout, storage
from spark_jobs.decode.planning import Remote, Segment
from spark_jobs.findings import Finding

PEM_SUFFIX = ".pem"


class TierReadError(storage.StorageError):
    """A remote segment's bytes could not be had (the tier's error, naming the object)."""


@dataclass(frozen=True)
class TierAccess:
    """The tier a run reads and its key ring as PEM bytes (picklable: it travels to the
    executors in the job's context). ``repr`` never shows a key."""

    uri: str
    pems: tuple = ()  # ((key id, PEM bytes), ...)
    keys_from: str | None = None  # the folder the keys were read from, for messages

    def __repr__(self) -> str:
        return f"TierAccess(uri={self.uri!r}, key_ids={[k for k, _ in self.pems]})"

    def key_ring(self) -> KeyRing | None:
        return _key_ring(self.pems, self.keys_from) if self.pems else None


@functools.lru_cache(maxsize=8)
def _key_ring(pems: tuple, folder: str | None) -> KeyRing:
    return KeyRing({key_id: load_private_key(pem, os.path.join(folder or "", key_id + PEM_SUFFIX))
                    for key_id, pem in pems})


def access_from_env(uri: str, environ=None) -> TierAccess:
    """The tier ``uri`` with the key ring of the folder :data:`layout.TIER_KEYS_ENV` names
    (every ``*.pem`` in it; none: unencrypted segments only). A folder that cannot be read
    or a file that is not an RSA private key is a ``KeyRingError`` (the job ends)."""
    environ = os.environ if environ is None else environ
    folder = environ.get(layout.TIER_KEYS_ENV) or None
    if folder is None:
        return TierAccess(uri)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(PEM_SUFFIX))
    except OSError as err:
        raise kafkalog.errors.KeyRingError(
            f"{layout.TIER_KEYS_ENV}={folder}: cannot list the key ring's folder "
            f"({err.strerror or err})") from err
    pems = []
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                pems.append((name[:-len(PEM_SUFFIX)], f.read()))
        except OSError as err:
            raise kafkalog.errors.KeyRingError(
                f"cannot read private key {os.path.join(folder, name)}: "
                f"{err.strerror or err}") from err
    access = TierAccess(uri, tuple(pems), folder)
    access.key_ring()  # each file must be an RSA private key: said now, not in a task
    return access


def live_rows(metadata: list[Segment], s3, findings: list[Finding]) -> list[dict]:
    """The live remote segments (:func:`kafkalog.tiered.inventory.replay`) after the events of
    the ``__remote_log_metadata`` segments ``metadata``; one that cannot be read is a
    ``fetch_error`` finding (its events are then missing: the segments they made live are
    not read)."""
    events = []
    for seg in sorted(metadata, key=lambda s: (s.partition, s.base_offset, s.uri)):
        store, key = storage.open_object(seg.uri, s3)
        try:
            data = store.read_pinned(key, seg.pin)
        except (storage.StorageError, OSError) as err:
            findings.append(_fetch_error(seg.topic, seg.partition, seg.uri, seg.base_offset,
                                         f"cannot read {seg.uri}: {err}; the remote segments "
                                         "its events name are not known"))
            continue
        events += read_events(data, metadata_partition=seg.partition)
    return inventory.replay(events)


def discover(access: TierAccess, metadata: list[Segment], s3, *, night: str | None = None,
             workers: int = 16) -> tuple[list[Segment], list[Finding]]:
    """The live remote segments of the tier, as segments to decode, and the findings of
    those that cannot be opened (module docstring, steps 1-2)."""
    findings: list[Finding] = []
    rows = live_rows(metadata, s3, findings)
    store, prefix = storage.tier_objects(access.uri, s3)

    def one(row):
        k = inventory.segment_keys(row, prefix)
        try:
            seg = RemoteSegment.open(k[MANIFEST], store=store, log_key=k[LOG],
                                     indexes_key=k[INDEXES])
        except kafkalog.KafkaLogError as err:
            return _fetch_error(row["topic"], row["partition"], store.uri(k[MANIFEST]),
                                row["start_offset"],
                                f"remote segment {row['segment_id']} (offsets "
                                f"{row['start_offset']}..{row['end_offset']}, live in "
                                f"{layout.REMOTE_LOG_METADATA_TOPIC}): {err}")
        return Segment(uri=store.uri(k[MANIFEST]), topic=row["topic"],
                       partition=row["partition"], base_offset=row["start_offset"],
                       size=seg.size, etag=row["segment_id"], night=night,
                       remote=Remote(store.uri(k[LOG]), store.uri(k[INDEXES]),
                                     row["end_offset"]))

    if len(rows) > 1:
        with concurrent.futures.ThreadPoolExecutor(min(workers, len(rows))) as pool:
            found = list(pool.map(one, rows))
    else:
        found = [one(r) for r in rows]
    segments = [s for s in found if isinstance(s, Segment)]
    findings += [f for f in found if isinstance(f, Finding)]
    return sorted(segments, key=lambda s: (s.topic, s.partition, s.base_offset)), findings


def _fetch_error(topic, partition, uri, base_offset, message) -> Finding:
    return Finding(kind="fetch_error", position=0, end=0, message=message, topic=topic,
                   partition=partition, segment=uri, segment_base_offset=base_offset)


_OPEN: dict = {}
_OPEN_LOCK = threading.Lock()


def open_remote(uri: str, remote: Remote, access: TierAccess, s3) -> RemoteSegment:
    """The remote segment whose manifest is ``uri`` (``remote``: where its ``.log`` and
    ``.indexes`` are), its manifest read once per process."""
    with _OPEN_LOCK:
        seg = _OPEN.get((uri, access))
    if seg is not None:
        return seg
    store, _ = storage.tier_objects(access.uri, s3)
    root = store.uri("k")[:-1]  # "s3://bucket/", or the local folder and its separator

    def key(full: str) -> str:  # a key of the tier's store
        return full[len(root):]
    seg = RemoteSegment.open(key(uri), store=store, key_ring=access.key_ring(),
                             log_key=key(remote.log_uri), indexes_key=key(remote.indexes_uri))
    with _OPEN_LOCK:
        if len(_OPEN) > 256:
            _OPEN.clear()
        return _OPEN.setdefault((uri, access), seg)


#: a task's chunks are read a window at a time, one ranged GET for the window's stored bytes
#: (they lie back to back in the ``.log``), and undone this many at a time (AES-GCM and zstd
#: release the GIL); a window is twice as many chunks (8 MiB of stored bytes per 4 MiB chunk
#: size: what is held beside the range)
READ_THREADS = 4


class _WindowStore:
    """An object store that serves the reads inside one block of one object (read in one GET
    by :meth:`load`) from memory, and every other read from ``store``."""

    def __init__(self, store):
        self.store, self.key, self.start, self.data = store, None, 0, b""

    def load(self, key: str, start: int, end: int) -> None:
        self.data = self.store.read(key, start, end)  # shorter where the object is short
        self.key, self.start = key, start

    def read(self, key: str, start: int, end: int) -> bytes:
        if key == self.key and self.start <= start and end <= self.start + len(self.data):
            return self.data[start - self.start:end - self.start]
        return self.store.read(key, start, end)  # (a short chunk is then found short)

    def list(self, prefix: str = ""):
        return self.store.list(prefix)

    def uri(self, key: str) -> str:
        return self.store.uri(key)


def read(item: Segment, access: TierAccess, s3, start: int, end: int) -> bytes | bytearray:
    """Bytes ``[start, end)`` of the remote segment ``item`` (its ``remote`` set): the chunks holding them read a window at a time (:data:`READ_THREADS`) and
    undone (``RemoteSegment.read_chunk``: every check of the library); any failure of the
    tier is a :class:`TierReadError` naming the object, and nothing is returned."""
    try:
        opened = open_remote(item.uri, item.remote, access, s3)
        chunks = opened.chunks(start, end)
        if len(chunks) < 2:
            return opened.read(start, end)
        window = _WindowStore(opened.store)
        seg = RemoteSegment(window, opened.manifest_key, opened.manifest,
                            key_ring=opened.key_ring, log_key=opened.log_key,
                            indexes_key=opened.indexes_key)
        out = bytearray(end - start)
        with concurrent.futures.ThreadPoolExecutor(READ_THREADS,
                                                   thread_name_prefix="tier-read") as pool:
            for at in range(0, len(chunks), 2 * READ_THREADS):
                group = chunks[at:at + 2 * READ_THREADS]
                window.load(seg.log_key, group[0].stored_position,
                            group[-1].stored_position + group[-1].stored_size)
                for chunk, data in zip(group, pool.map(seg.read_chunk, group)):
                    lo = max(start, chunk.original_position)
                    hi = min(end, chunk.original_position + chunk.original_size)
                    out[lo - start:hi - start] = \
                        memoryview(data)[lo - chunk.original_position:hi - chunk.original_position]
        return out
    except kafkalog.KafkaLogError as err:
        raise TierReadError(str(err)) from err


def split_positions(segments: list[Segment], access: TierAccess, s3,
                    workers: int = 16) -> dict[str, list[int]]:
    """The batch positions of each remote segment's offset index (from ``.indexes``), by
    its ``uri``; [] where it has none or it cannot be read (the segment is one task, and
    that task reports what is wrong)."""
    def one(seg):
        try:
            data = open_remote(seg.uri, seg.remote, access, s3).index_bytes("offset")
            return offset_index_positions(data) if data else []
        except kafkalog.KafkaLogError:
            return []
    if not segments:
        return {}
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(segments))) as pool:
        return dict(zip((s.uri for s in segments), pool.map(one, segments)))


def overlapping(segs: list[Segment]) -> list[Segment]:
    """Of one partition's segments, those worth framing against each other: where it has
    local segments, those and the remote segments whose offsets reach its first local
    offset (the other remote segments cannot meet the local tail: they are decoded as they
    are, not framed); else all of them."""
    local = [s for s in segs if not s.remote]
    if not local:
        return segs
    first = min(s.base_offset for s in local)
    return local + [s for s in segs if s.remote and s.remote.end_offset >= first]


__all__ = ["PEM_SUFFIX", "TierAccess", "TierReadError", "access_from_env", "discover",
           "live_rows", "open_remote", "overlapping", "read", "split_positions"]
