"""Parquet data files as the warehouse's tables hold them: the write schema and options of
each table (:func:`write_schema`, :func:`parquet_options`), one writer of a task's files
(:class:`PartWriter`) and the folder a file goes in (:func:`partition_path`, read back by
:func:`topic_of`); a file read back in a table's schema, a column it lacks null
(:func:`conform`).

The decode job (:mod:`spark_jobs.decode`), the derived tables (:mod:`spark_jobs.derive`) and
maintenance's rewrites (:mod:`spark_jobs.maintenance`) write with these. A file is named
``<run prefix>~<part>.parquet`` so that a rerun of the run (or of the chunk) removes exactly
its files (docs/tables.md); the partition values are the files' own columns.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs import schemas, storage

#: ascending per partition: delta-encoded (a few bits a row, and no dictionary to build)
DELTA_COLUMNS = ("offset", "timestamp")


#: plain pages, no dictionary: one value per batch (or per file) repeated on every record
#: row, which LZ4 squeezes as well as a dictionary would (files +2%), at a third of the
#: cost; and the nested headers and value_json, whose dictionary saves nothing on unique values
PLAIN_COLUMNS = frozenset({
    "partition", "batch_position", "batch_base_offset", "batch_last_offset", "magic",
    "producer_id", "producer_epoch", "sequence", "partition_leader_epoch",
    "segment_base_offset", "is_transactional", "headers", "value_json"})


#: strings the job hands to Parquet as dictionary arrays: the same few values on every
#: row (index types: the records' two come from kafkalog.stream(dictionary=True))
LINEAGE_DICTIONARIES = {"segment": pa.int32(), "run_id": pa.int32(), "topic": pa.int32(),
                         schemas.INGEST_DT: pa.int32()}


DICTIONARY_COLUMNS = {"records": {**LINEAGE_DICTIONARIES, "dt": pa.int32(),
                                  "timestamp_type": pa.int8(), "compression": pa.int8()}}


@functools.lru_cache(maxsize=None)
def write_schema(table: str) -> pa.Schema:
    """The Arrow schema a task writes ``table`` with: its file schema, with the
    :data:`DICTIONARY_COLUMNS` as dictionaries. A Parquet string column is the same
    either way, and files are written without the Arrow schema
    (``store_schema=False``), so readers see the file schema's plain strings."""
    dictionaries = DICTIONARY_COLUMNS.get(table, LINEAGE_DICTIONARIES)
    return pa.schema([
        pa.field(f.name, pa.dictionary(dictionaries[f.name], f.type))
        if f.name in dictionaries else f for f in schemas.TABLES[table]])


def parquet_options(schema: pa.Schema) -> dict:
    """ParquetWriter options: LZ4 (raw) pages, delta-encoded offsets and timestamps,
    :data:`PLAIN_COLUMNS` plain, dictionaries elsewhere (Parquet falls back to plain
    pages by itself)."""
    delta = [c for c in DELTA_COLUMNS if c in schema.names]
    return dict(compression="lz4", store_schema=False,
                write_statistics=[c for c in schemas.STATISTICS if c in schema.names],
                use_dictionary=[n for n in schema.names
                                if n not in delta and n not in PLAIN_COLUMNS],
                column_encoding={c: "DELTA_BINARY_PACKED" for c in delta})


def read_parquet(path: str, config=None) -> pa.Table:
    """A whole Parquet file the pipeline wrote (local or ``s3://``), as its file holds it."""
    import io

    store, key = storage.open_object(path, config)
    return pq.read_table(io.BytesIO(store.read(key)))


def column_or_null(table: pa.Table, field: pa.Field):
    """``table``'s column ``field.name``, or nulls of ``field.type`` where it has none: a
    column a file lacks reads null (as Iceberg reads a column added after a file was
    written)."""
    if field.name in table.column_names:
        return table.column(field.name)
    return pa.nulls(table.num_rows, field.type)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: its columns in that order, cast, a column it lacks null
    (:func:`column_or_null`), the columns ``schema`` does not name left out."""
    return pa.Table.from_arrays([column_or_null(table, f) for f in schema],
                                names=schema.names).cast(schema)


def write_parquet(path: str, rows: pa.Table, config=None) -> None:
    """Write ``rows`` as one Parquet file at ``path`` (local or ``s3://``), with the job's
    options for their schema (:func:`parquet_options`): written locally, then put there."""
    fd, local = tempfile.mkstemp(suffix=".parquet", prefix="kafkalog-")
    os.close(fd)
    try:
        with pq.ParquetWriter(local, rows.schema, **parquet_options(rows.schema)) as writer:
            writer.write_table(rows)
        store, key = storage.open_object(path, config)
        store.put_file(key, local)  # (a local store moves the file there)
    finally:
        if os.path.exists(local):
            os.unlink(local)


class PartWriter:
    """Parquet files of one task, one per table and partition value, moved into the
    table's data folder (``roots``) at the end; :meth:`commit` returns their URIs.

    Parquet encoding runs on a thread of its own (Arrow releases the GIL), one
    batch at a time, while the task decodes the next: at most one batch waits.

    ``ctx`` is the run's context (:class:`spark_jobs.decode.writing.Context`): its
    ``prefix`` names the files, its ``s3`` reaches the data folders.
    """

    def __init__(self, ctx, part: str, roots: dict):
        self.ctx = ctx
        self.part = part
        self.roots = roots
        self.tmp = tempfile.mkdtemp(prefix="kafkalog-")
        self.writers: dict[tuple[str, str], tuple[pq.ParquetWriter, str]] = {}
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None  # from the first write
        self._in_flight: concurrent.futures.Future | None = None

    def write(self, table: str, directory: str, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        name = f"{self.ctx.prefix}~{self.part}.parquet"
        key = (table, f"{directory}/{name}" if directory else name)
        entry = self.writers.get(key)
        target = write_schema(table)
        if entry is None:
            os.makedirs(self.tmp, exist_ok=True)  # again after an abort
            local = os.path.join(self.tmp, f"{len(self.writers)}.parquet")
            entry = (pq.ParquetWriter(local, target, **parquet_options(target)), local)
            self.writers[key] = entry
        if batch.schema != target:
            batch = batch.cast(target)
        self._wait()
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="parquet")
        write = entry[0].write_batch if isinstance(batch, pa.RecordBatch) else entry[0].write_table
        self._in_flight = self._thread.submit(write, batch)

    def _wait(self) -> None:
        """Wait for the batch in flight; its error, if any, is raised here."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def _stop_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown()

    def commit(self) -> dict[str, list[str]]:
        try:
            self._wait()
        finally:
            self._stop_thread()
        files: dict[str, list[str]] = {}
        for (table, key), (writer, local) in self.writers.items():
            writer.close()
            store = storage.open_store(self.roots[table], self.ctx.s3)
            store.put_file(key, local)
            files.setdefault(table, []).append(storage.join(self.roots[table], key))
        shutil.rmtree(self.tmp, ignore_errors=True)
        return files

    def abort(self) -> None:
        """Throw away what was written; writing can start again."""
        try:
            self._wait()
        except Exception:  # noqa: BLE001 - the files are thrown away anyway
            pass
        self._stop_thread()
        for writer, _ in self.writers.values():
            writer.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.writers.clear()


def partition_path(topic: str | None, day: str | None = None) -> str:
    """A data file's folder under its table's data root (Iceberg ignores folder names:
    the partition values are the files' own columns; these keep the layout readable)."""
    path = f"topic={topic if topic is not None else '__null__'}"
    return path if day is None else f"{path}/dt={day}"


def topic_of(path: str) -> str | None:
    """The topic of a data file from its folder ``topic=<name>`` (:func:`partition_path`;
    None where the path has none)."""
    for part in path.split("/"):
        if part.startswith("topic="):
            return part[len("topic="):]
    return None


__all__ = ["DELTA_COLUMNS", "DICTIONARY_COLUMNS", "LINEAGE_DICTIONARIES", "PLAIN_COLUMNS",
           "PartWriter", "parquet_options", "partition_path", "read_parquet", "topic_of",
           "write_parquet", "write_schema"]
