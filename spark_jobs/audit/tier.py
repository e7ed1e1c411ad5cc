"""The tier audit (issue 34, docs/tiered.md "The tier audit"): checks of tiered storage, from
the run's ``remote_segments`` rows (its state as of the night, replayed from
``__remote_log_metadata``: :mod:`spark_jobs.derive.remote`), one listing of the tier
(``check_quality --tiered-storage``) and the run's ``tier_divergence`` findings.

* ``tier_copy_orphans``: a segment whose last state is COPY_SEGMENT_STARTED. A copy may be in
  flight when the snapshot was taken: its age is measured against the latest event time of
  its metadata partition (not the wall clock: a night audited later is judged the same), and
  a copy younger than the policy's ``grace_minutes`` is ``in_flight``, an older one ``orphan``.
* ``tier_missing_objects``: a live segment (COPY_SEGMENT_FINISHED, its partition not being
  deleted) whose ``.log``, ``.indexes`` or ``.rsm-manifest`` (a plain copy's ``.log``) the
  listing lacks; one observation per segment, naming the keys. The segment is found by its id
  (Aiven's keys), by its start offset (a plain copy's), or at the keys its custom metadata
  names (``object_prefix`` + ``object_key``, :func:`kafkalog.tiered.layout.object_key`).
* ``tier_unreferenced_objects``: a listed segment no segment id knows (``unreferenced``), or
  whose segment the metadata says was deleted (``deleted_segment``: DELETE_SEGMENT_STARTED or
  FINISHED, the objects still there). Listed objects that are no segment's are not judged.
* ``tier_reuploads``: one topic-partition start offset that several segment ids brought to
  COPY_SEGMENT_FINISHED (one observation per start offset).
* ``tier_leader_epochs``: consecutive live segments of a partition by start offset, where the
  next does not start at the previous end + 1 (``offset_gap``: offsets no segment holds;
  ``offset_overlap``), or its first leader epoch is below the previous one's last
  (``epoch_regression``). Segments of one start offset are ``tier_reuploads``' business.
* ``tier_divergence``: one observation per ``tier_divergence`` finding (the decode job's
  reconciliation of a remote copy and the local tail, :data:`spark_jobs.findings.TIER_DIVERGENCE`).

Each check is optional (:data:`.registry.OPTIONAL_CHECKS`): a partition gets results of the
metadata checks where it has ``remote_segments`` rows, of the listing checks where the audit
also listed a tier, of ``tier_divergence`` where it is tiered at all. Results go to the tiered
topic-partition the metadata names. Everything is small (a row per remote segment, a key per
object), so the observations are made on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalog.tiered import inventory
from kafkalog.tiered import layout as tier_layout
from spark_jobs import storage
from spark_jobs.derive.remote import TABLE  # the table the metadata checks read
from spark_jobs.findings import TIER_DIVERGENCE

from .inputs import RunFrames
from .units import REMOTE_SEGMENTS, TIERED_PARTITIONS, TIER_SEGMENTS

#: where :func:`load` keeps its inputs in :attr:`.inputs.RunFrames.internal`
KEY = "tier"
#: the check names (:data:`.registry.TIER_CHECKS`)
ORPHANS, MISSING, UNREFERENCED, REUPLOADS, EPOCHS, DIVERGENCE = (
    "tier_copy_orphans", "tier_missing_objects", "tier_unreferenced_objects", "tier_reuploads",
    "tier_leader_epochs", "tier_divergence")
#: a copy younger than this (minutes, against its metadata partition's latest event) is in
#: flight: the policy's ``checks.tier_copy_orphans.grace_minutes`` unless it names one
DEFAULT_GRACE_MINUTES = 60
STARTED, FINISHED = "COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED"
DELETED = ("DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED")


class TierListingError(storage.StorageError):
    """The tier named by ``--tiered-storage`` cannot be listed."""


@dataclass
class TierInputs:
    """What the tier checks read: the run's ``remote_segments`` rows (plain dicts), the
    tier's segments (:class:`kafkalog.tiered.layout.TierSegment`, None: no tier listed),
    every listed key, and the ``tier_divergence`` findings (plain dicts)."""

    segments: list[dict]
    listed: list | None = None
    keys: set = field(default_factory=set)
    prefix: str = ""  # the tier's key prefix (the plugin's key.prefix)
    divergences: list[dict] = field(default_factory=list)


def list_tier(uri: str, s3: storage.S3Config | None = None) -> tuple[list, set, str]:
    """The tier under ``uri`` (``s3://bucket/key-prefix``, or a local folder holding a copy of
    the bucket) listed once: ``(segments, keys, key prefix)``, keys relative to the bucket
    (the folder). Raises :class:`TierListingError`."""
    if storage.is_s3(uri):
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        store = storage.open_store(f"s3://{bucket}", s3)
    else:
        prefix, store = "", storage.open_store(uri)
    try:
        listing = [(o.key, o.size) for o in store.list(prefix)]
    except (storage.StorageError, OSError) as err:
        raise TierListingError(f"--tiered-storage {uri}: {err}") from err
    segments, keys = inventory.listing(listing)
    return segments, keys, prefix


def load(spark, wh, run_id: str, snapshots: dict, findings, tiered_storage: str | None = None
         ) -> dict:
    """``{KEY: TierInputs}`` for run ``run_id`` (``snapshots``: :func:`.inputs.audited_snapshots`,
    ``findings`` the run's findings frame), or ``{}`` where there is nothing to check: no
    ``remote_segments`` rows, no tier and no ``tier_divergence`` finding."""
    from spark_jobs.tables import read_table

    rows = []
    if TABLE in snapshots:
        rows = [r.asDict(recursive=True) for r in read_table(
            spark, wh, TABLE, snapshot=snapshots[TABLE][1], run_id=run_id).collect()]
    divergences = [r.asDict() for r in findings.where(findings.kind == TIER_DIVERGENCE)
                   .select("topic", "partition", "base_offset", "last_offset", "segment",
                           "position", "message").collect()]
    inputs = TierInputs(rows, divergences=divergences)
    if tiered_storage:
        inputs.listed, inputs.keys, inputs.prefix = list_tier(tiered_storage, wh.s3)
    if not rows and not divergences and not inputs.listed:
        return {}
    return {KEY: inputs}


def _place(x) -> tuple:
    return (x["topic"], x["partition"]) if isinstance(x, dict) else (x.topic, x.partition)


def units(internal: dict) -> dict:
    """(topic, partition) -> ``{unit: n}`` of the tier checks: remote segments (metadata
    rows), tier segments (with a listing: the segment ids of both), tiered partitions (1)."""
    tier = internal.get(KEY)
    out: dict = {}
    if tier is None:
        return out
    for r in tier.segments:
        u = out.setdefault(_place(r), {TIERED_PARTITIONS: 1})
        u[REMOTE_SEGMENTS] = u.get(REMOTE_SEGMENTS, 0) + 1
    for f in tier.divergences:
        out.setdefault(_place(f), {TIERED_PARTITIONS: 1})
    if tier.listed is not None and tier.segments:
        ids: dict = {}
        for r in tier.segments:
            ids.setdefault(_place(r), set()).add(r["segment_id"])
        for s in tier.listed:
            ids.setdefault(_place(s), set()).add(s.segment_id or s.base)
        for place, known in ids.items():
            out.setdefault(place, {TIERED_PARTITIONS: 1})[TIER_SEGMENTS] = len(known)
    return out


def _last_event(row: dict):
    times = [h["event_timestamp"] for h in row["state_history"] if h["event_timestamp"]]
    return max(times) if times else None


def _obs(check, row, cls, message, value=None, segment=None) -> tuple:
    start, end = row.get("start_offset"), row.get("end_offset")
    return (check, row["topic"], row["partition"], cls, start, end,
            end - start + 1 if start is not None and end is not None else None, value,
            segment if segment is not None else row.get("segment_id"), None, message)


def _live(rows: list[dict]) -> list[dict]:
    return [r for r in rows if inventory.is_live(r)]


def orphan_observations(rows: list[dict], policy) -> list[tuple]:
    """``tier_copy_orphans``: each copy whose last state is COPY_SEGMENT_STARTED, ``orphan``
    or ``in_flight`` by its age against its metadata partition's latest event."""
    latest: dict = {}
    for r in rows:
        for h in r["state_history"]:
            if h["event_timestamp"] is not None:
                p = h["metadata_partition"]
                latest[p] = max(latest.get(p, h["event_timestamp"]), h["event_timestamp"])
    out = []
    for r in rows:
        if r["state"] != STARTED:
            continue
        grace = policy.check(r["topic"], ORPHANS).get("grace_minutes", DEFAULT_GRACE_MINUTES)
        started = _last_event(r)
        newest = latest.get(r["state_history"][-1]["metadata_partition"])
        age = int((newest - started).total_seconds() * 1000) if started and newest else None
        cls = "orphan" if age is None or age > grace * 60_000 else "in_flight"
        out.append(_obs(ORPHANS, r, cls, value=age, message=(
            f"remote segment {r['segment_id']} of {r['topic']}-{r['partition']} (offsets "
            f"{r['start_offset']}..{r['end_offset']}): its copy started "
            f"{'at an unknown time' if age is None else f'{age / 60_000:.0f} min'} before "
            f"the metadata's latest event and never finished"
            + (" (within the grace period: in flight)" if cls == "in_flight" else ""))))
    return out


def expected_keys(row: dict, found, aiven: bool, prefix: str = "") -> dict:
    """suffix -> the key a live segment's object should have, as the plugin finds it
    (ObjectKeyFactory): where its custom metadata names a prefix or a main path, those
    (:func:`kafkalog.tiered.inventory.segment_keys`, the tier's ``prefix`` for what it does not
    name); else beside the listed segment ``found``; else at the tier's own prefix. A plain
    copy (minio-rsm) has its ``.log`` only."""
    plain = ((found is not None and found.layout == tier_layout.PLAIN)
             or (not aiven and found is None))
    if plain:
        return {tier_layout.LOG: found.base + tier_layout.LOG if found is not None else None}
    if not inventory.has_custom_keys(row) and found is not None:
        return {s: found.base + s for s in tier_layout.AIVEN_SUFFIXES}
    return inventory.segment_keys(row, prefix)


def missing_observations(rows: list[dict], listed, keys: set, prefix: str = "") -> list[tuple]:
    """``tier_missing_objects``: each live segment whose objects the listing (``keys``, under
    the tier's key ``prefix``) lacks."""
    index = inventory.index_listing(listed)
    aiven = any(s.layout == tier_layout.AIVEN for s in listed) or not listed
    out = []
    for r in _live(rows):
        found = inventory.find_listed(r, index)
        want = expected_keys(r, found, aiven, prefix)
        gone = sorted(s for s, k in want.items() if k is None or k not in keys)
        if gone:
            out.append(_obs(MISSING, r, "missing_object", value=len(gone), message=(
                f"remote segment {r['segment_id']} of {r['topic']}-{r['partition']} (offsets "
                f"{r['start_offset']}..{r['end_offset']}) is live in __remote_log_metadata, "
                f"but the tier lacks its {', '.join(gone)}"
                + (f" ({', '.join(want[s] for s in gone if want[s])})"
                   if any(want[s] for s in gone) else " (no object of it is listed)"))))
    return out


def unreferenced_observations(rows: list[dict], listed) -> list[tuple]:
    """``tier_unreferenced_objects``: each listed segment no metadata names, or whose
    segment was deleted."""
    index = inventory.index_rows(rows)
    out = []
    for s in listed:
        r = inventory.find_row(s, index)
        if r is not None and r["state"] not in DELETED:
            continue
        cls = "unreferenced" if r is None else "deleted_segment"
        what = (f"no segment id of __remote_log_metadata names it" if r is None
                else f"__remote_log_metadata says segment {r['segment_id']} is {r['state']}")
        out.append((UNREFERENCED, s.topic, s.partition, cls, s.start_offset, None, None,
                    sum(s.objects.values()), s.base, None,
                    f"{s.base}{{{','.join(sorted(s.objects))}}} ({sum(s.objects.values())} "
                    f"bytes) is in the tier; {what}"))
    return out


def reupload_observations(rows: list[dict]) -> list[tuple]:
    """``tier_reuploads``: start offsets of a topic partition that several segment ids
    brought to COPY_SEGMENT_FINISHED."""
    groups: dict = {}
    for r in rows:
        if any(h["state"] == FINISHED for h in r["state_history"]):
            groups.setdefault((r["topic_id"], r["topic"], r["partition"], r["start_offset"]),
                              []).append(r)
    out = []
    for (_, topic, partition, start), rs in sorted(groups.items(), key=lambda kv: kv[0][1:]):
        if len(rs) < 2:
            continue
        names = ", ".join(f"{r['segment_id']} ({r['state']})" for r in rs)
        out.append(_obs(REUPLOADS, rs[-1], "reupload", value=len(rs), message=(
            f"{len(rs)} remote segments of {topic}-{partition} start at offset {start} and "
            f"were all copied: {names}")))
    return out


def epoch_observations(rows: list[dict]) -> list[tuple]:
    """``tier_leader_epochs``: consecutive live segments of a partition that do not continue
    each other (offsets or leader epochs)."""
    by_tp: dict = {}
    for r in _live(rows):
        by_tp.setdefault((r["topic_id"], r["partition"]), []).append(r)
    out = []
    for segs in by_tp.values():
        segs.sort(key=lambda r: (r["start_offset"], r["end_offset"]))
        for prev, nxt in zip(segs, segs[1:]):
            if nxt["start_offset"] == prev["start_offset"]:
                continue  # a re-upload: tier_reuploads
            tp = f"{nxt['topic']}-{nxt['partition']}"
            pair = f"remote segments {prev['segment_id']} and {nxt['segment_id']} of {tp}"
            if nxt["start_offset"] > prev["end_offset"] + 1:
                out.append((EPOCHS, nxt["topic"], nxt["partition"], "offset_gap",
                            prev["end_offset"] + 1, nxt["start_offset"] - 1,
                            nxt["start_offset"] - prev["end_offset"] - 1, None,
                            nxt["segment_id"], None,
                            f"{pair}: offsets {prev['end_offset'] + 1}..{nxt['start_offset'] - 1}"
                            " are in no remote segment"))
                continue
            if nxt["start_offset"] <= prev["end_offset"]:
                out.append((EPOCHS, nxt["topic"], nxt["partition"],
                            "offset_overlap", nxt["start_offset"], prev["end_offset"],
                            prev["end_offset"] - nxt["start_offset"] + 1, None,
                            nxt["segment_id"], None,
                            f"{pair}: both hold offsets {nxt['start_offset']}.."
                            f"{prev['end_offset']}"))
                continue
            last = prev["segment_leader_epochs"][-1]["leader_epoch"] \
                if prev["segment_leader_epochs"] else None
            first = nxt["segment_leader_epochs"][0]["leader_epoch"] \
                if nxt["segment_leader_epochs"] else None
            if last is not None and first is not None and first < last:
                out.append(_obs(EPOCHS, nxt, "epoch_regression", value=first, message=(
                    f"{pair}: the first ends in leader epoch {last}, the next starts at offset "
                    f"{nxt['start_offset']} in leader epoch {first}: the leader-epoch chain "
                    "goes back")))
    return out


def divergence_observations(divergences: list[dict]) -> list[tuple]:
    """``tier_divergence``: one per finding of that kind."""
    return [(DIVERGENCE, f["topic"], f["partition"], "divergence", f["base_offset"],
             f["last_offset"], (f["last_offset"] - f["base_offset"] + 1)
             if f["base_offset"] is not None and f["last_offset"] is not None else None,
             None, f["segment"], f["position"], f["message"]) for f in divergences]


def _observe(run: RunFrames, make):
    """The observations ``make`` finds in the run's tier inputs, as tuples (made on the
    driver: no Spark job); None where the run has no tier inputs or they do not apply."""
    tier = run.internal.get(KEY)
    if tier is None:
        return None
    return make(tier)


def observe_orphans(run: RunFrames):
    return _observe(run, lambda t: orphan_observations(t.segments, run.policy)
                    if t.segments else None)


def observe_missing(run: RunFrames):
    return _observe(run, lambda t: missing_observations(t.segments, t.listed, t.keys, t.prefix)
                    if t.segments and t.listed is not None else None)


def observe_unreferenced(run: RunFrames):
    return _observe(run, lambda t: unreferenced_observations(t.segments, t.listed)
                    if t.segments and t.listed is not None else None)


def observe_reuploads(run: RunFrames):
    return _observe(run, lambda t: reupload_observations(t.segments) if t.segments else None)


def observe_epochs(run: RunFrames):
    return _observe(run, lambda t: epoch_observations(t.segments) if t.segments else None)


def observe_divergence(run: RunFrames):
    return _observe(run, lambda t: divergence_observations(t.divergences))


__all__ = ["DEFAULT_GRACE_MINUTES", "DIVERGENCE", "EPOCHS", "KEY", "MISSING", "ORPHANS",
           "REUPLOADS", "TierInputs", "TierListingError", "UNREFERENCED",
           "divergence_observations", "epoch_observations", "expected_keys", "list_tier",
           "load", "missing_observations", "observe_divergence", "observe_epochs",
           "observe_missing", "observe_orphans", "observe_reuploads", "observe_unreferenced",
           "orphan_observations", "reupload_observations", "units",
           "unreferenced_observations"]
