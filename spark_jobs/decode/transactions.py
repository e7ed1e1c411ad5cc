"""``records.txn_state``: each transactional record's outcome, from the markers (issue 35).

The rule, as Kafka's own readers apply it: a transactional record belongs to the first
COMMIT or ABORT marker of its producer id in its partition at a higher offset whose
producer epoch is not below the record's. A broker appends a marker only with an epoch at
least the producer's current one (``ProducerAppendInfo.checkProducerEpoch``: equal for
transaction versions 0/1, one above since transaction version 2, KIP-890), so a marker
with a lower epoch is a stale one (fenced; a broker only logs it when replicating) and
ends nothing of the record's. A read_committed consumer skips the aborted batches of a
producer up to its ABORT marker (``CompletedFetch``), which gives the same answer.
``committed``/``aborted`` (:data:`spark_jobs.schemas.TXN_ENDS`); ``open`` while no such
marker is known in any night; null outside transactions.

Two places resolve it, so that the decode path stays a single pass:

* **in the task** (:class:`InTask`): the task holds back the transactional rows of a
  producer until its marker comes by in the same task, then writes them with their
  state; rows still waiting at the task's end are written ``open``;
* **after the commit** (:func:`resolve_open`, on the driver): the ``open`` rows of the
  partitions where the run wrote open rows or markers meet every marker the branch holds
  (this run's other tasks, segments, chunks, and earlier nights): the data files holding
  rows whose state is now known are rewritten (copy-on-write: the same rows, the new
  state) and replace the old ones in one snapshot on the run's branch, published with the
  run. A rewritten file keeps its original file's name with ``~txn<attempt>`` added, so a
  rerun of the run that first wrote those rows replaces them, and a rerun of the
  resolving run leaves them (its resolution finds nothing left to do).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import schemas, storage
from spark_jobs.parquet import write_parquet, write_schema

#: the suffix a rewritten data file's name gets (before ``.parquet``)
REWRITE_SUFFIX = re.compile(r"~txn[0-9a-z]+$")


class MarkerIndex:
    """COMMIT/ABORT markers by key (a producer id, or (topic, partition, producer id)):
    :meth:`state` gives a record's outcome by the rule above, :meth:`states` many records'
    at once (vectorised per producer)."""

    def __init__(self):
        self._by: dict = {}  # key -> [(offset, epoch, state)]
        self._arrays: dict = {}  # key -> (offsets, epochs, states) sorted, as numpy arrays
        self.count = 0

    def add(self, keys, epochs, offsets, control_types, valid=None) -> None:
        """Markers (parallel sequences); control records other than COMMIT/ABORT and those
        whose batch CRC failed (``valid`` False) are left out."""
        valid = valid if valid is not None else [True] * len(offsets)
        for key, epoch, offset, kind, ok in zip(keys, epochs, offsets, control_types, valid):
            state = schemas.TXN_ENDS.get(kind)
            if state is None or ok is False:
                continue
            self._by.setdefault(key, []).append((offset, epoch, state))
            self._arrays.pop(key, None)
            self.count += 1

    def _sorted(self, key):
        found = self._arrays.get(key)
        if found is None:
            markers = sorted(self._by[key])
            found = self._arrays[key] = (
                np.array([m[0] for m in markers], np.int64),
                np.array([m[1] for m in markers], np.int64),
                np.array([m[2] for m in markers], object))
        return found

    def end(self, key, epoch: int, offset: int) -> tuple[int, int, str] | None:
        """The first marker of ``key`` after ``offset`` with an epoch not below ``epoch``:
        ``(its offset, its epoch, the state it gives)``; None where there is none (yet)."""
        if key not in self._by:
            return None
        offsets, epochs, states = self._sorted(key)
        i = int(np.searchsorted(offsets, offset, side="right"))
        later = np.nonzero(epochs[i:] >= epoch)[0]
        if not len(later):
            return None
        j = i + int(later[0])
        return int(offsets[j]), int(epochs[j]), states[j]

    def state(self, key, epoch: int, offset: int) -> str | None:
        """The state the first marker of ``key`` after ``offset`` with an epoch not below
        ``epoch`` gives; None where there is none (yet)."""
        found = self.end(key, epoch, offset)
        return found[2] if found is not None else None

    def states(self, keys, epochs, offsets) -> np.ndarray:
        """:meth:`state` of each record (parallel sequences), an object array (None: no
        marker yet): per key, the first marker after each offset found by a binary
        search; only where that marker's epoch is below the record's (a stale marker)
        is the next one looked for record by record."""
        keys = np.asarray(keys) if not isinstance(keys, np.ndarray) else keys
        epochs, offsets = np.asarray(epochs, np.int64), np.asarray(offsets, np.int64)
        out = np.full(len(offsets), None, object)
        if not self._by or not len(offsets):
            return out
        for key in (np.unique(keys) if keys.dtype != object else set(keys.tolist())):
            key = key.item() if hasattr(key, "item") else key
            if key not in self._by:
                continue
            rows = np.nonzero(keys == key)[0] if keys.dtype != object else \
                np.array([i for i, k in enumerate(keys.tolist()) if k == key], np.int64)
            m_offsets, m_epochs, m_states = self._sorted(key)
            at = np.searchsorted(m_offsets, offsets[rows], side="right")
            found = at < len(m_offsets)
            rows, at = rows[found], at[found]
            fits = m_epochs[at] >= epochs[rows]
            out[rows[fits]] = m_states[at[fits]]
            for r in rows[~fits]:  # a stale marker first: the next one that fits, if any
                out[r] = self.state(key, int(epochs[r]), int(offsets[r]))
        return out


def _with_state(rows, states) -> pa.Table:
    """``rows`` (a batch or table of records) with :data:`~spark_jobs.schemas.TXN_STATE`."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    column = states if isinstance(states, pa.Array) else pa.array(states, pa.string())
    if schemas.TXN_STATE in table.column_names:
        return table.set_column(table.column_names.index(schemas.TXN_STATE),
                                schemas.TXN_STATE, column)
    return table.append_column(schemas.TXN_STATE, column)


#: the transactional rows a task holds back for their markers, at most (Arrow bytes): kafkalog's
#: stream hands markers over when their own buffer fills or at the end, so a task of a
#: transactional topic would otherwise hold its records until then; past this, rows are
#: written ``open`` and resolved after the commit (:func:`resolve_open`)
MAX_WAITING_BYTES = 64 << 20


class InTask:
    """One task's transactional rows, held back until their marker comes in the same
    task (kafkalog's stream hands records and markers over in batches of their own, in
    either order)."""

    def __init__(self, max_waiting_bytes: int = MAX_WAITING_BYTES):
        self.markers = MarkerIndex()
        self.waiting: list[pa.Table] = []
        self.max_waiting_bytes = max_waiting_bytes
        self.resolved = 0

    @property
    def waiting_bytes(self) -> int:
        return sum(t.nbytes for t in self.waiting)

    def take(self, rows) -> pa.Table:
        """The rows of ``rows`` to write now, with their state: those outside transactions
        and those whose marker the task has seen; the rest wait."""
        txn = rows.column("is_transactional")
        if not pc.any(txn).as_py():
            return _with_state(rows, pa.nulls(rows.num_rows, pa.string()))
        ready, waiting = self._split(_with_state(rows, pa.nulls(rows.num_rows, pa.string())))
        if waiting is not None:
            self.waiting.append(waiting)
        return ready

    def _split(self, rows: pa.Table):
        txn = pc.fill_null(rows.column("is_transactional"), False).to_numpy(zero_copy_only=False)
        states = np.full(rows.num_rows, None, object)
        where = np.nonzero(txn)[0]
        states[where] = self.markers.states(
            rows.column("producer_id").to_numpy(zero_copy_only=False)[where],
            rows.column("producer_epoch").to_numpy(zero_copy_only=False)[where],
            rows.column("offset").to_numpy(zero_copy_only=False)[where])
        known = states != None  # noqa: E711 - elementwise on an object array
        wait = txn & ~known
        rows = _with_state(rows, pa.array(states, pa.string()))
        self.resolved += int(known.sum())
        if not wait.any():
            return rows, None
        if self.waiting_bytes + rows.nbytes > self.max_waiting_bytes:
            # no more held back: written open, the driver's step resolves them
            return _with_state(rows, pa.array(np.where(wait, schemas.TXN_OPEN, states),
                                              pa.string())), None
        return rows.filter(pa.array(~wait)), rows.filter(pa.array(wait))

    def add_markers(self, batch) -> pa.Table | None:
        """Take in a batch of markers; the waiting rows they resolve (None: none)."""
        self.markers.add(batch.column("producer_id").to_pylist(),
                         batch.column("producer_epoch").to_pylist(),
                         batch.column("offset").to_pylist(),
                         batch.column("control_type").to_pylist(),
                         batch.column("crc_valid").to_pylist())
        if not self.waiting:
            return None
        held, self.waiting = pa.concat_tables(self.waiting), []
        ready, waiting = self._split(held)
        self.waiting = [waiting] if waiting is not None else []
        return ready if ready.num_rows else None

    def leftovers(self) -> pa.Table | None:
        """The rows still waiting at the task's end, ``open``."""
        if not self.waiting:
            return None
        rows = pa.concat_tables(self.waiting)
        self.waiting = []
        return _with_state(rows, pa.repeat(pa.scalar(schemas.TXN_OPEN), rows.num_rows))


# ------------------------------------------------------------------ after the commit

def _files_rows(paths, config) -> dict[str, pa.Table]:
    from spark_jobs.tables import read_file

    return {p: read_file(p, "records", config) for p in paths}


def _partitions_with(table: pa.Table, mask) -> set:
    picked = table.filter(mask).select(["topic", "partition"])
    return set(zip(picked.column("topic").to_pylist(), picked.column("partition").to_pylist()))


def _open_mask(table: pa.Table):
    return pc.fill_null(pc.equal(table.column(schemas.TXN_STATE), schemas.TXN_OPEN), False)


def _has_state_column(table, data_file) -> bool:
    """Whether a records data file was written with ``txn_state`` (its statistics count
    the column): one written before holds no ``open`` row, though pruning cannot tell."""
    return table.schema().find_field(schemas.TXN_STATE).field_id in (data_file.value_counts or {})


def rewritten_path(path: str, attempt: str) -> str:
    """A rewritten data file's path: beside ``path``, its name ``path``'s (without an
    earlier rewrite's suffix) with ``~txn<attempt>``."""
    folder, name = path.rsplit("/", 1) if "/" in path else ("", path)
    stem = REWRITE_SUFFIX.sub("", name[:-len(".parquet")] if name.endswith(".parquet") else name)
    return f"{folder}/{stem}~txn{attempt}.parquet" if folder else f"{stem}~txn{attempt}.parquet"


def _write_file(path: str, rows: pa.Table, config) -> None:
    target = write_schema("records")
    write_parquet(path, rows.select(target.names).cast(target), config)


def plan_rewrites(wh, run_id: str, head: int, chunk_id: str | None = None) -> dict:
    """What :func:`resolve_open` rewrites at ``head`` of the run's branch of ``records``:
    ``{path: rows with their new states}`` of the files holding an ``open`` row whose
    state is now known, the count of rows resolved and the rows now committed (``{"files":
    {...}, "rows": n, "committed": [tables]}``)."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In

    from spark_jobs import tables
    from spark_jobs.warehouse import branch_name, is_run_file

    config, branch = wh.s3, branch_name(run_id)  # markers: as the run's branch holds them

    def mine(paths):
        return [p for p in paths if is_run_file(p, run_id, chunk_id)]

    # the partitions where this submission wrote markers or open rows
    marker_files = mine(tables.table_paths(wh, "markers", ref=branch, run_id=run_id))
    new_markers = [tables.read_file(p, "markers", config) for p in marker_files]
    wanted = set()
    for m in new_markers:
        wanted |= _partitions_with(m, pc.is_in(m.column("control_type"),
                                               pa.array(list(schemas.TXN_ENDS))))
    is_open = EqualTo(schemas.TXN_STATE, schemas.TXN_OPEN)
    cache = _files_rows(mine(tables.table_paths(wh, "records", snapshot=head, row_filter=is_open,
                                                run_id=run_id, keep=_has_state_column)), config)
    for rows in cache.values():
        wanted |= _partitions_with(rows, _open_mask(rows))
    if not wanted:
        return {"files": {}, "rows": 0, "committed": []}
    topics = sorted({t for t, _ in wanted})
    paths = tables.table_paths(wh, "records", snapshot=head, keep=_has_state_column, row_filter=And(
        is_open, And(In("topic", topics), In("partition", sorted({p for _, p in wanted})))))
    cache.update(_files_rows([p for p in paths if p not in cache], config))
    lowest = None
    for rows in cache.values():
        opened = rows.filter(_open_mask(rows))
        if opened.num_rows:
            low = pc.min(opened.column("offset")).as_py()
            lowest = low if lowest is None else min(lowest, low)
    if lowest is None:
        return {"files": {}, "rows": 0, "committed": []}
    index = MarkerIndex()
    found = tables.read_arrow(wh, "markers", ref=branch, config=config, row_filter=And(
        In("topic", topics), GreaterThanOrEqual("offset", lowest)))
    index.add(list(zip(found.column("topic").to_pylist(), found.column("partition").to_pylist(),
                       found.column("producer_id").to_pylist())),
              found.column("producer_epoch").to_pylist(), found.column("offset").to_pylist(),
              found.column("control_type").to_pylist(), found.column("crc_valid").to_pylist())
    out, resolved, committed = {}, 0, []
    for path, rows in cache.items():
        states = rows.column(schemas.TXN_STATE).to_pylist()
        keys = zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(),
                   rows.column("producer_id").to_pylist())
        changed = 0
        for i, (key, epoch, offset) in enumerate(zip(keys, rows.column("producer_epoch").to_pylist(),
                                                      rows.column("offset").to_pylist())):
            if states[i] == schemas.TXN_OPEN and key[:2] in wanted:
                state = index.state(key, epoch, offset)
                if state is not None:
                    states[i] = state
                    changed += 1
        if changed:
            out[path] = _with_state(rows, states)
            resolved += changed
            now = pc.equal(out[path].column(schemas.TXN_STATE), schemas.TXN_ENDS["COMMIT"])
            committed.append(out[path].filter(pc.and_(pc.fill_null(now, False),
                                                      _open_mask(rows))))
    return {"files": out, "rows": resolved, "committed": committed}


def resolve_open(wh, run_id: str, ctx, chunk_id: str | None = None) -> dict:
    """Resolve the ``open`` rows that the markers on run ``run_id``'s branch now decide
    (see the module's text), committing the rewritten files to the branch in one
    snapshot; a branch moved meanwhile (another chunk of the run) is read again. Returns
    ``{"rows": resolved, "files": rewritten, "committed": the rows now committed}`` (the
    per-key tables fold those in: :mod:`spark_jobs.derive.keyed`)."""
    from spark_jobs.warehouse.commits import Rewrite

    attempt_id = ctx.prefix.rsplit("~", 1)[-1]

    def plan(head: int, attempt: int):
        planned = plan_rewrites(wh, run_id, head, chunk_id)
        if not planned["files"]:
            return {"rows": 0, "files": 0, "committed": None}
        written = {}
        try:
            for path, rows in planned["files"].items():
                written[path] = rewritten_path(path, f"{attempt_id}{attempt}")
                _write_file(written[path], rows, wh.s3)
        except BaseException:
            storage.delete_uncommitted(written.values(), wh.s3)
            raise
        committed = planned["committed"]
        return Rewrite(list(written), list(written.values()),
                       {"kafkalog.step": "txn_state", "kafkalog.txn-resolved": planned["rows"]},
                       {"rows": planned["rows"], "files": len(written),
                        "committed": pa.concat_tables(committed) if committed else None})

    return wh.commit_rewrite("records", run_id, plan, what="records: could not resolve open "
                             f"transactions of run {run_id!r}")


__all__ = ["InTask", "MAX_WAITING_BYTES", "MarkerIndex", "REWRITE_SUFFIX", "plan_rewrites", "resolve_open",
           "rewritten_path"]
