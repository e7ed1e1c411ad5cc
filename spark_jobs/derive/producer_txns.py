"""``producer_transactions``: one row per transaction as the data partitions show it (issue 45).

The ``transactions`` table is what ``__transaction_state`` says; this one is what the
partitions the producers wrote hold: for each transactional producer id, its data
batches grouped into transactions by the markers that end them.

* **A batch's end**: the rule of ``records.txn_state`` (:mod:`spark_jobs.decode.transactions`,
  whose :class:`~spark_jobs.decode.transactions.MarkerIndex` is used here): the first
  COMMIT/ABORT marker of its producer id in its partition after it whose epoch is not
  below the batch's; none known yet: ``open``.
* **A piece**: the batches of one producer id and epoch in one partition that one marker
  ends (or that none ends yet).
* **A transaction**: a producer's pieces of one epoch that overlap in time. A producer
  runs one transaction at a time, and the coordinator writes every marker of a
  transaction before the producer's next transaction may add a partition
  (``CONCURRENT_TRANSACTIONS`` until then), so the pieces of consecutive transactions do
  not overlap: sorted by their first batch's time, a piece that starts after the earliest
  marker of the transaction being built begins the next one.
* **Offset commits**: a piece in ``__consumer_offsets`` is the producer's
  ``TxnOffsetCommit``; the ``consumer_offsets`` rows at its offsets give the group and the
  committed input offsets.
* **Fenced**: a transaction whose epoch is below one its producer id already used before
  it began (a data batch of a higher epoch that started earlier, or ``__transaction_state``
  naming the producer at a higher epoch earlier): a zombie's writes, which fencing should
  have refused.

**Resolved across nights**: each decode submission recomputes every transaction of the
producer ids it wrote batches or markers of, from all the batches and markers the run's
branch holds (every night), and writes them with ``as_of`` (the run's ingest time): a
producer's rows are those of its latest ``as_of`` (:func:`current`), so a transaction
``open`` in one night is the next night's ``committed`` once its late marker arrives.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import schemas
from spark_jobs.decode.transactions import MarkerIndex
from spark_jobs.derive.step import Output, Submission

#: the topic whose partitions' transactional batches are offset commits
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TABLE = "producer_transactions"
_BATCH_COLUMNS = ("topic", "partition", "base_offset", "last_offset", "record_count", "magic",
                  "producer_id", "producer_epoch", "is_transactional", "is_control",
                  "first_timestamp", "max_timestamp", "crc_valid")


def _ms(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def _when(ms: int | None):
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def data_batches(batches: pa.Table) -> list[dict]:
    """The transactional data batches (v2, not control, CRC-valid), one per (topic,
    partition, base offset), in offset order."""
    rows = batches.select(list(_BATCH_COLUMNS)).to_pylist()
    seen, out = set(), []
    for b in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["base_offset"])):
        key = (b["topic"], b["partition"], b["base_offset"])
        if (b["magic"] != 2 or not b["is_transactional"] or b["is_control"]
                or b["crc_valid"] is False or key in seen):
            continue
        seen.add(key)
        out.append(b)
    return out


def marker_index(markers: pa.Table) -> tuple[MarkerIndex, dict]:
    """The markers by (topic, partition, producer id), and their timestamps by (topic,
    partition, offset)."""
    index = MarkerIndex()
    topic, part = markers.column("topic").to_pylist(), markers.column("partition").to_pylist()
    pids, offsets = markers.column("producer_id").to_pylist(), markers.column("offset").to_pylist()
    index.add(list(zip(topic, part, pids)), markers.column("producer_epoch").to_pylist(), offsets,
              markers.column("control_type").to_pylist(), markers.column("crc_valid").to_pylist())
    times = dict(zip(zip(topic, part, offsets), map(_ms, markers.column("timestamp").to_pylist())))
    return index, times


def _pieces(batches: list[dict], index: MarkerIndex, times: dict) -> list[dict]:
    pieces: dict = {}
    for b in batches:
        pid, epoch = b["producer_id"], b["producer_epoch"]
        end = index.end((b["topic"], b["partition"], pid), epoch, b["last_offset"])
        key = (pid, epoch, b["topic"], b["partition"], end[0] if end else None)
        p = pieces.get(key)
        if p is None:
            p = pieces[key] = {
                "producer_id": pid, "producer_epoch": epoch, "topic": b["topic"],
                "partition": b["partition"], "first_offset": b["base_offset"], "batches": 0,
                "records": 0, "start": _ms(b["first_timestamp"]),
                "marker_offset": end[0] if end else None, "marker_epoch": end[1] if end else None,
                "outcome": end[2] if end else schemas.TXN_OPEN,
                "end": times.get((b["topic"], b["partition"], end[0])) if end else None}
        p["last_offset"] = b["last_offset"]
        p["batches"] += 1
        p["records"] += b["record_count"]
        p["start"] = min(p["start"], _ms(b["first_timestamp"]))
    return list(pieces.values())


def _group(pieces: list[dict]) -> list[list[dict]]:
    """The pieces of one producer id and epoch as transactions (see the module's text)."""
    out: list[list[dict]] = []
    bound = None  # the earliest marker time of the transaction being built (None: open)
    for p in sorted(pieces, key=lambda p: (p["start"], p["topic"], p["partition"])):
        if out and (bound is None or p["start"] <= bound):
            out[-1].append(p)
        else:
            out.append([p])
            bound = None
        ends = [q["end"] for q in out[-1] if q["end"] is not None]
        bound = min(ends) if len(ends) == len(out[-1]) else None
    return out


def _commits(offsets: pa.Table | None) -> dict:
    """(__consumer_offsets partition) -> [(source offset, group, topic, partition, offset)]."""
    out: dict = {}
    if offsets is None or not offsets.num_rows:
        return out
    for r in offsets.select(["group", "topic", "partition", "committed_offset", "source_topic",
                             "source_partition", "source_offset", "tombstone"]).to_pylist():
        if r["source_topic"] == CONSUMER_OFFSETS_TOPIC and not r["tombstone"] \
                and r["committed_offset"] is not None:
            out.setdefault(r["source_partition"], []).append(r)
    return out


def _txn_ids(transactions: pa.Table | None) -> tuple[dict, dict]:
    """producer id -> transactional.id, and producer id -> [(time, epoch)] the coordinator
    recorded (``__transaction_state``)."""
    ids, epochs = {}, {}
    if transactions is None:
        return ids, epochs
    for r in transactions.select(["transactional_id", "producer_id", "producer_epoch",
                                  "last_update_timestamp", "timestamp"]).to_pylist():
        if r["producer_id"] is None or r["producer_id"] < 0:
            continue
        ids[r["producer_id"]] = r["transactional_id"]
        when = _ms(r["last_update_timestamp"]) or _ms(r["timestamp"])
        if r["producer_epoch"] is not None and when is not None:
            epochs.setdefault(r["producer_id"], []).append((when, r["producer_epoch"]))
    return ids, epochs


def build(batches: pa.Table, markers: pa.Table, offsets: pa.Table | None = None,
          transactions: pa.Table | None = None, *, as_of=None, run_id: str | None = None
          ) -> pa.Table:
    """The ``producer_transactions`` rows of the producers in ``batches`` (every batch and
    marker of theirs: see the module's text); ``offsets``: ``consumer_offsets`` rows,
    ``transactions``: ``__transaction_state``'s rows."""
    index, times = marker_index(markers)
    commits = _commits(offsets)
    ids, coordinator_epochs = _txn_ids(transactions)
    by_producer: dict = {}
    for p in _pieces(data_batches(batches), index, times):
        by_producer.setdefault((p["producer_id"], p["producer_epoch"]), []).append(p)
    txns = [(pid, epoch, group) for (pid, epoch), ps in by_producer.items() for group in _group(ps)]
    # the first time each producer id was seen at each epoch: what fencing is judged by
    first_at: dict = {}
    for pid, epoch, group in txns:
        start = min(p["start"] for p in group)
        first_at.setdefault(pid, []).append((start, epoch))
    for pid, seen in coordinator_epochs.items():
        first_at.setdefault(pid, []).extend(seen)
    rows = []
    for pid, epoch, group in sorted(txns, key=lambda t: (t[0], min(p["start"] for p in t[2]), t[1])):
        group = sorted(group, key=lambda p: (p["topic"], p["partition"], p["first_offset"]))
        start = min(p["start"] for p in group)
        outcomes = {p["outcome"] for p in group}
        outcome = schemas.TXN_OPEN if schemas.TXN_OPEN in outcomes else \
            (schemas.TXN_ENDS["ABORT"] if schemas.TXN_ENDS["ABORT"] in outcomes
             else schemas.TXN_ENDS["COMMIT"])
        end = None if outcome == schemas.TXN_OPEN else max(p["end"] or start for p in group)
        made = []
        for p in group:
            if p["topic"] != CONSUMER_OFFSETS_TOPIC:
                continue
            for c in commits.get(p["partition"], ()):
                if p["first_offset"] <= c["source_offset"] <= p["last_offset"]:
                    made.append({"group": c["group"], "topic": c["topic"],
                                 "partition": c["partition"],
                                 "committed_offset": c["committed_offset"],
                                 "source_partition": p["partition"],
                                 "source_offset": c["source_offset"]})
        epochs = [p["marker_epoch"] for p in group if p["marker_epoch"] is not None]
        rows.append({
            "transactional_id": ids.get(pid), "producer_id": pid, "producer_epoch": epoch,
            "marker_epoch": max(epochs) if epochs else None, "outcome": outcome,
            "partitions": [{k: p[k] for k in ("topic", "partition", "first_offset", "last_offset",
                                              "batches", "records", "marker_offset")}
                           for p in group],
            "start_time": _when(start), "end_time": _when(end),
            "duration_ms": None if end is None else end - start,
            "offsets_committed": any(p["topic"] == CONSUMER_OFFSETS_TOPIC for p in group),
            "groups": sorted({m["group"] for m in made}),
            "offset_commits": sorted(made, key=lambda m: m["source_offset"]),
            "fenced": any(e > epoch and t < start for t, e in first_at.get(pid, ())),
            "txn_key": f"{pid}:{epoch}:{group[0]['topic']}-{group[0]['partition']}"
                       f"@{group[0]['first_offset']}",
            "as_of": as_of, "run_id": run_id})
    return pa.Table.from_pylist(rows, schema=schemas.TABLES[TABLE])


def current(table: pa.Table) -> pa.Table:
    """The rows of each producer id as of its latest ``as_of`` (the latest submission's
    recomputation: see the module's text)."""
    if not table.num_rows:
        return table
    latest: dict = {}
    for pid, when in zip(table.column("producer_id").to_pylist(), table.column("as_of").to_pylist()):
        if pid not in latest or (when is not None and (latest[pid] is None or when > latest[pid])):
            latest[pid] = when
    keep = [latest[p] == w for p, w in zip(table.column("producer_id").to_pylist(),
                                           table.column("as_of").to_pylist())]
    return table.filter(pa.array(keep))


# ------------------------------------------------------------------ the decode job's step

def _producers(paths: list[str], name: str, config) -> set[int]:
    from spark_jobs.tables import read_file

    out: set[int] = set()
    for path in paths:
        t = read_file(path, name, config)
        if name == "batches":
            t = t.filter(pc.fill_null(t.column("is_transactional"), False))
        out |= {p for p in pc.unique(t.column("producer_id")).to_pylist() if p is not None and p >= 0}
    return out


def derive(sub: Submission) -> Output:
    """After the run's commit (and the open transactions' resolution): the transactions of
    every producer id this submission wrote transactional batches or markers of
    (``sub.files``), recomputed from the run's branch: ``({TABLE: files}, {TABLE: rows})``,
    which the decode job commits (nothing where the submission wrote none and the table does
    not exist yet)."""
    from pyiceberg.expressions import In

    from spark_jobs.parquet import PartWriter, write_schema

    wh = sub.wh
    pids = _producers(sub.files.get("batches", []), "batches", wh.s3) | \
        _producers(sub.files.get("markers", []), "markers", wh.s3)
    if not pids:
        return ({TABLE: []}, {TABLE: 0}) if TABLE in sub.bases else ({}, {})
    only = In("producer_id", sorted(pids))
    batches = sub.read_branch("batches", row_filter=only, columns=_BATCH_COLUMNS)
    markers = sub.read_branch("markers", row_filter=only)
    # internal topics' tables: empty in a warehouse that never saw one, and where another
    # chunk of the run is making them now (Submission.read_branch)
    offsets = sub.read_branch("consumer_offsets")
    txns = sub.read_branch("transactions")
    out = build(batches, markers, offsets, txns,
                as_of=dt.datetime.now(dt.timezone.utc), run_id=sub.run_id)
    written = []
    if out.num_rows:
        writer = PartWriter(sub.ctx, "eos", {TABLE: wh.data_root(TABLE)})
        writer.write(TABLE, "", out.cast(write_schema(TABLE)))
        written = writer.commit().get(TABLE, [])
    return {TABLE: written}, {TABLE: out.num_rows}


__all__ = ["CONSUMER_OFFSETS_TOPIC", "TABLE", "build", "current", "data_batches", "derive",
           "marker_index"]
