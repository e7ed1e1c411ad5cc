"""Find a night's snapshot segments in S3 and plan them into chunks balanced by bytes.

A snapshot is what the nightly copy leaves under
``s3://{bucket}/{template}``, the template (default ``{prefix}/{snapshot_date}/``)
filled with the snapshot date; below it, one directory per partition as a broker
names them (``<topic>-<partition>/``) holding ``<20-digit base offset>.log``
segments and their index files. Only ``.log`` objects are work; the decode job
finds the index siblings itself. The partitions' state files go with their partition's
chunk, a log directory's own files (``meta.properties``, the offset checkpoints, KRaft's:
``spark_jobs.layout.LOG_DIR_FILE_KEY``) all to one chunk, so each is read once per run.

Pure functions (no Airflow): :func:`snapshot_prefix`, :func:`snapshot_dates`,
:func:`parse_segment_key`, :func:`plan_chunks`; :func:`list_segments` talks to
S3 through a boto3 paginator and turns the errors that retrying cannot fix
(missing bucket, bad credentials) into :class:`PermanentS3Error`.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from spark_jobs import layout
from spark_jobs.layout import topic_matcher  # noqa: F401 (the listing's topic filter)


#: S3 error codes no retry can fix
PERMANENT_CODES = frozenset({
    "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
    "AllAccessDisabled", "InvalidBucketName", "ExpiredToken", "InvalidToken",
    "AuthorizationHeaderMalformed", "AccountProblem", "403", "404",
})

MAX_DATES = 366


class PermanentS3Error(RuntimeError):
    """The snapshot location cannot be listed and retrying will not help."""


class TransientS3Error(RuntimeError):
    """Listing failed in a way a retry may fix (network, throttling, 5xx)."""


@dataclass(frozen=True, order=True)
class Segment:
    topic: str
    partition: int
    snapshot_date: str
    base_offset: int
    uri: str
    size: int
    etag: str | None = None

    def manifest_entry(self) -> dict:
        return {"uri": self.uri, "size": self.size, "etag": self.etag,
                "night": self.snapshot_date}


@dataclass
class Chunk:
    chunk_id: int
    bytes: int = 0
    partitions: list[tuple[str, int]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    #: URIs of the chunk's partitions' state files (layout.STATE_FILE_KEY)
    state_files: list[str] = field(default_factory=list)
    #: the log directories' own files this chunk reads (layout.LOG_DIR_FILE_KEY), as
    #: ``{"uri", "night"}``: each log directory's in one chunk of the run
    log_dir_files: list[dict] = field(default_factory=list)
    #: ``.log`` objects whose names place them in no partition: the job records an
    #: ``unparsable_name`` finding of each (the audit grades it)
    unplaced: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"chunk_id": self.chunk_id, "bytes": self.bytes,
                "segments": len(self.segments), "unplaced": len(self.unplaced),
                "partitions": [f"{t}-{p}" for t, p in self.partitions]}

    def manifest(self) -> bytes:
        """The chunk's segment manifest (:func:`spark_jobs.layout.manifest`)."""
        return layout.manifest([s.manifest_entry() for s in self.segments] + self.unplaced,
                               self.chunk_id, self.state_files, self.log_dir_files)


# ------------------------------------------------------------------ dates
def _date(value) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).date() if value.tzinfo else value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value).strip()[:10])
    except ValueError:
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def snapshot_dates(date_from=None, date_to=None, *, interval_start=None, logical_date=None,
                   run_after=None) -> list[str]:
    """The snapshot dates a run covers, as ``YYYY-MM-DD`` strings.

    A manual range (``date_from``/``date_to``, inclusive; one of them alone means
    that single date) wins; otherwise the UTC date of the data interval's start,
    else of the logical date, else of ``run_after`` (manual runs without a
    logical date).
    """
    if date_from or date_to:
        first = _date(date_from or date_to)
        last = _date(date_to or date_from)
        if last < first:
            raise ValueError(f"date range ends ({last}) before it starts ({first})")
        n = (last - first).days + 1
        if n > MAX_DATES:
            raise ValueError(f"date range of {n} days is longer than {MAX_DATES}")
        return [(first + dt.timedelta(days=i)).isoformat() for i in range(n)]
    for value in (interval_start, logical_date, run_after):
        if value is not None:
            return [_date(value).isoformat()]
    raise ValueError("no snapshot date: the run has no data interval, logical date or range")


def snapshot_prefix(template: str, prefix: str, snapshot_date: str) -> str:
    """The key prefix of one night's snapshot: ``template`` filled in, ending in ``/``.

    Placeholders: ``{prefix}``, ``{snapshot_date}`` (YYYY-MM-DD), ``{yyyy}``,
    ``{mm}``, ``{dd}``, ``{compact_date}`` (YYYYMMDD).
    """
    d = _date(snapshot_date)
    try:
        filled = template.format(prefix=prefix.strip("/"), snapshot_date=d.isoformat(),
                                 yyyy=f"{d.year:04d}", mm=f"{d.month:02d}", dd=f"{d.day:02d}",
                                 compact_date=d.strftime("%Y%m%d"))
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"snapshot template {template!r} cannot be filled: {err}") from None
    if d.isoformat() not in filled and d.strftime("%Y%m%d") not in filled \
            and f"{d.year:04d}" not in filled:
        raise ValueError(f"snapshot template {template!r} does not use the snapshot date")
    filled = re.sub(r"/+", "/", filled).lstrip("/")
    return filled if filled.endswith("/") else filled + "/"


# ------------------------------------------------------------------ listing
def parse_segment_key(key: str, prefix: str) -> tuple[str, int, int] | None:
    """(topic, partition, base offset) of a ``.log`` key under ``prefix``, else None
    (the grammar: :mod:`spark_jobs.layout`)."""
    if not key.startswith(prefix):
        return None
    return layout.parse_segment_key(key[len(prefix):])


def classify(err: Exception, where: str) -> Exception:
    """A :class:`PermanentS3Error` or :class:`TransientS3Error` saying what went wrong."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
        return PermanentS3Error(f"cannot list {where}: no usable AWS credentials ({err}); "
                                "set the aws_default connection or AWS_ACCESS_KEY_ID/"
                                "AWS_SECRET_ACCESS_KEY")
    if isinstance(err, ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", ""))
        msg = error.get("Message") or ""
        if code == "NoSuchBucket":
            return PermanentS3Error(f"cannot list {where}: the bucket does not exist ({code})")
        if code in PERMANENT_CODES:
            return PermanentS3Error(f"cannot list {where}: access refused ({code}: {msg}); "
                                    "check the credentials of the aws_default connection "
                                    "or the AWS_* environment")
        return TransientS3Error(f"cannot list {where}: {code}: {msg}")
    return TransientS3Error(f"cannot list {where}: {type(err).__name__}: {err}")


def list_segments(bucket: str, prefixes: dict[str, str], access, *, topics=None,
                  client=None, unparsable: list | None = None,
                  state_files: list | None = None, log_dir_files: list | None = None,
                  logs: dict | None = None) -> tuple[list[Segment], int]:
    """Every ``.log`` segment under each snapshot date's prefix.

    ``prefixes`` maps snapshot date -> key prefix. Returns the segments (sorted
    by topic, partition, date, base offset) and the number of objects ignored
    (not a segment, or a topic the filter leaves out). The URIs of ``.log`` objects
    whose names do not parse are appended to ``unparsable``; the partitions' state files
    (``.snapshot``, ``leader-epoch-checkpoint``, ``partition.metadata``) to ``state_files``,
    as ``(topic, partition, uri)`` (they count as ignored: they are not segments); the log
    directories' own files (``meta.properties``, the offset checkpoints, KRaft's:
    layout.LOG_DIR_FILE_KEY) to ``log_dir_files`` as ``(snapshot date, uri)``, whatever
    the topic filter (they are no topic's).
    ``logs`` (snapshot date -> n) counts each date's ``.log`` objects, whatever their names
    and topics: a date with none has no snapshot.
    """
    client = client or access.resolved().client()  # the job's client: one retry policy
    keep = topic_matcher(topics)
    segments: list[Segment] = []
    ignored = 0
    paginator = client.get_paginator("list_objects_v2")
    for date, prefix in sorted(prefixes.items()):
        where = f"s3://{bucket}/{prefix}"
        try:
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    if logs is not None and layout.is_log(obj["Key"]):
                        logs[date] = logs.get(date, 0) + 1
                    parsed = parse_segment_key(obj["Key"], prefix)
                    if parsed is None and unparsable is not None and layout.is_log(obj["Key"]):
                        unparsable.append(f"s3://{bucket}/{obj['Key']}")
                    if parsed is None or not keep(parsed[0]):
                        ignored += 1
                        state = layout.parse_state_key(obj["Key"][len(prefix):]) \
                            if parsed is None and state_files is not None else None
                        if state is not None and keep(state[0]):
                            state_files.append((state[0], state[1],
                                                f"s3://{bucket}/{obj['Key']}"))
                        elif parsed is None and log_dir_files is not None and \
                                layout.parse_log_dir_key(obj["Key"][len(prefix):]) is not None:
                            log_dir_files.append((date, f"s3://{bucket}/{obj['Key']}"))
                        continue
                    topic, partition, base = parsed
                    segments.append(Segment(
                        topic=topic, partition=partition, snapshot_date=date,
                        base_offset=base, uri=f"s3://{bucket}/{obj['Key']}",
                        size=int(obj["Size"]),
                        etag=(obj.get("ETag") or "").strip('"') or None))
        except Exception as err:
            raise classify(err, where) from err
    segments.sort()
    return segments, ignored


# ------------------------------------------------------------------ planning
def plan_chunks(segments: Iterable[Segment], *, target_bytes: int,
                max_chunks: int, to_decode: Callable[[Segment], int] | None = None,
                state_files: Iterable[tuple[str, int, str]] = (),
                log_dir_files: Iterable[tuple[str, str]] = ()) -> list[Chunk]:
    """Group segments into chunks balanced by bytes, each topic-partition in one chunk.

    A segment weighs ``to_decode(segment)`` bytes (default: its size): what its
    decode will read, 0 for one already ingested (its task only checks it is the
    same). The number of chunks is ``ceil(total / target_bytes)``, at least one,
    at most ``max_chunks`` and at most the number of partitions with bytes to
    decode. Partitions are placed heaviest first on the lightest chunk (LPT);
    ties break on the name so the plan is the same for the same input. Empty
    chunks are dropped; chunk ids are 0..n-1 in order of the chunks' first
    partition; a chunk's ``bytes`` are its bytes to decode. ``state_files``
    (``(topic, partition, uri)``, :func:`list_segments`) go with their partition's chunk:
    a partition without segments has no chunk, and its state files are not read.
    ``log_dir_files`` (``(snapshot date, uri)``) go, a log directory's all together, to
    the first chunk holding a segment of that log directory (else chunk 0): each file is
    read once however many chunks the run has.
    """
    if target_bytes <= 0 or max_chunks <= 0:
        raise ValueError("target_bytes and max_chunks must be positive")
    weigh = to_decode or (lambda s: s.size)
    by_tp: dict[tuple[str, int], list[Segment]] = {}
    for s in segments:
        by_tp.setdefault((s.topic, s.partition), []).append(s)
    if not by_tp:
        return []
    sizes = {tp: sum(weigh(s) for s in segs) for tp, segs in by_tp.items()}
    total = sum(sizes.values())
    busy = sum(1 for n in sizes.values() if n > 0)
    n = max(1, min(max_chunks, busy, math.ceil(total / target_bytes)))
    heap = [(0, i) for i in range(n)]
    bins: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    for tp in sorted(by_tp, key=lambda tp: (-sizes[tp], tp)):
        load, i = heapq.heappop(heap)
        bins[i].append(tp)
        heapq.heappush(heap, (load + sizes[tp], i))
    groups = sorted((sorted(b) for b in bins if b), key=lambda b: b[0])
    chunks = []
    for k, tps in enumerate(groups):
        chunk = Chunk(chunk_id=k, partitions=tps)
        for tp in tps:
            segs = sorted(by_tp[tp], key=lambda s: (s.snapshot_date, s.base_offset, s.uri))
            chunk.segments.extend(segs)
            chunk.bytes += sizes[tp]
        chunks.append(chunk)
    where = {tp: chunk for chunk in chunks for tp in chunk.partitions}
    for topic, partition, uri in sorted(state_files):
        if (topic, partition) in where:
            where[(topic, partition)].state_files.append(uri)
    holding: dict[str, Chunk] = {}  # log dir -> the first chunk with a segment under it
    for chunk in chunks:
        for s in chunk.segments:
            holding.setdefault(s.uri.rsplit("/", 2)[0], chunk)
    for date, uri in sorted(log_dir_files):
        log_dir = layout.parse_log_dir_key(uri)[0]
        holding.get(log_dir, chunks[0]).log_dir_files.append({"uri": uri, "night": date})
    return chunks


def segment_dict(s: Segment) -> dict:
    return asdict(s)
