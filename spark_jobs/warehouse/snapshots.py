"""Committing to a table: the compare-and-swap commits of the run lifecycle, written here
rather than through pyiceberg's ``Transaction`` where that costs too much (docs/bench_job.md).

* :func:`commit_refs` moves branches and sets table properties in one commit;
* :class:`SnapshotWriter` (:func:`commit_snapshot`) adds one snapshot to a branch in one
  pass: the files a predicate selects dropped, DataFiles added;
* :func:`data_files` makes the DataFiles of written Parquet files, as pyiceberg would;
* :func:`rewrite_manifests` commits a branch again with its manifests rewritten;
* :func:`adding_snapshot`: a snapshot beaten to its sequence number comes out as pyiceberg's
  own refusal.

Every commit names the branch head it expects: where another writer moved it, the catalog
refuses. Each goes through :func:`.commits.send`, which says what became of it
(:class:`.errors.CommitRefused`, :class:`.errors.CommitFailed`); the caller re-reads the
table and decides again (:func:`.commits.retry`).
"""

from __future__ import annotations

import contextlib

from spark_jobs.warehouse import commits
from spark_jobs.warehouse.history import data_manifests
from spark_jobs.warehouse.naming import MAIN


@contextlib.contextmanager
def adding_snapshot():
    """Around pyiceberg's own commit of a snapshot: a race lost to another writer of the
    table comes out as pyiceberg's ``CommitFailedException``, whichever way the catalog
    said it (:data:`._pyiceberg.STALE_SEQUENCE`)."""
    from pyiceberg.exceptions import CommitFailedException

    from spark_jobs.warehouse import _pyiceberg

    try:
        yield
    except ValueError as err:
        if _pyiceberg.is_stale_sequence(err):
            raise CommitFailedException(f"another snapshot came first: {err}") from err
        raise


def commit_refs(table, moves: dict[str, tuple[int | None, int | None]], *,
                properties: dict | None = None, removed: tuple[str, ...] = (),
                tags: dict[str, tuple[int | None, int]] | None = None) -> None:
    """One compare-and-swap commit of ``table``'s branches and properties: each
    ``branch: (now, then)`` in ``moves`` must point at snapshot ``now`` (None: not exist)
    and then points at ``then`` (None: dropped); each ``tag: (now, then)`` of ``tags`` the
    same for a tag (made or moved); ``properties`` are set and ``removed`` taken away in
    the same commit. Raises :class:`.errors.CommitRefused` where a branch is not
    where the caller saw it (:func:`.commits.send`); updates ``table`` in place.

    The updates and requirements go to the catalog as they are (what a REST catalog's
    commit request carries). pyiceberg's ``ManageSnapshots`` keeps only one requirement of
    a kind per commit, so it cannot check two branches at once, and copies the whole
    metadata at every step: most of a commit's time here (docs/bench_job.md)."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import (AssertRefSnapshotId, AssertTableUUID,
                                        RemovePropertiesUpdate, RemoveSnapshotRefUpdate,
                                        SetPropertiesUpdate, SetSnapshotRefUpdate)

    from spark_jobs.warehouse import _pyiceberg

    requirements = [AssertTableUUID(uuid=table.metadata.table_uuid)]
    updates = []
    for ref, (now, then) in moves.items():
        requirements.append(AssertRefSnapshotId(ref=ref, snapshot_id=now))
        updates.append(RemoveSnapshotRefUpdate(ref_name=ref) if then is None else
                       SetSnapshotRefUpdate(ref_name=ref, type=SnapshotRefType.BRANCH,
                                            snapshot_id=then))
    for ref, (now, then) in (tags or {}).items():
        requirements.append(AssertRefSnapshotId(ref=ref, snapshot_id=now))
        updates.append(SetSnapshotRefUpdate(ref_name=ref, type=SnapshotRefType.TAG,
                                            snapshot_id=then))
    if properties:
        updates.append(SetPropertiesUpdate(updates=properties))
    if removed:
        updates.append(RemovePropertiesUpdate(removals=list(removed)))
    # the one per-table commit call pyiceberg's own transactions make (tests count it)
    commits.send(table, lambda: _pyiceberg.do_commit(table, tuple(updates), tuple(requirements)),
                 landed=commits.refs_landed({**moves, **(tags or {})}, properties=properties,
                                            removed=removed))


class SnapshotWriter:
    """One snapshot on branch ``ref`` of ``table``, written in one pass: the snapshot
    pyiceberg's overwrite makes (manifests, manifest list, the summary's totals), an
    ``append`` where nothing is dropped, else an ``overwrite`` whose rewritten manifests
    mark the dropped files deleted. pyiceberg's ``Transaction`` reads the head's manifests
    three times and deep-copies the whole table metadata ~16 times per snapshot
    (docs/bench_job.md).

    :meth:`write` goes step by step: :meth:`_drop` (the head's manifests, those with a
    dropped file rewritten), :meth:`_add` (a manifest of the added files),
    :meth:`_manifest_list` and :meth:`_snapshot`, then :meth:`_commit`, a compare-and-swap
    on the branch head as ``table`` had it (:func:`.commits.send`). The files it wrote
    are deleted again where the commit is known not to have happened."""

    def __init__(self, table, ref: str, summary: dict):
        import uuid

        from pyiceberg.table import TableProperties
        from pyiceberg.table.snapshots import SnapshotSummaryCollector

        md = table.metadata
        self.table, self.ref, self.summary, self.metadata = table, ref, summary, md
        self.head = md.refs[ref].snapshot_id if ref in md.refs else None
        self.snapshot_id, self.commit_uuid = md.new_snapshot_id(), uuid.uuid4()
        self.schema, self.specs = md.schema(), md.specs()
        self.compression = md.properties.get(TableProperties.WRITE_AVRO_COMPRESSION,
                                             TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
        self.collector = SnapshotSummaryCollector(partition_summary_limit=int(md.properties.get(
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)))
        self.written: list[str] = []  # manifests and manifest list, in the table's metadata/
        self.dropped = False

    def write(self, *, add: list, remove) -> int | None:
        """Drop the head's live files that ``remove`` (a path predicate) selects, add the
        DataFiles ``add``. Returns the new head, or the head as it was where there is
        nothing to drop or add (no commit)."""
        try:
            manifests = self._drop(remove)
            if not add and not self.dropped:
                return self.head
            if add:
                manifests.insert(0, self._add(add))
            snapshot = self._snapshot(self._manifest_list(manifests))
        except BaseException:
            self._discard()  # nothing refers to the files written before the commit
            raise
        commits.send(self.table, lambda: self._commit(snapshot), discard=self._discard,
                     landed=commits.snapshot_landed(self.snapshot_id))
        return self.snapshot_id

    def _discard(self) -> None:
        for path in self.written:
            self.table.io.delete(path)

    def _manifest_writer(self, spec_id: int):
        from pyiceberg.manifest import write_manifest

        path = self.table.location_provider().new_metadata_location(
            f"{self.commit_uuid}-m{len(self.written)}.avro")
        self.written.append(path)
        return write_manifest(format_version=self.metadata.format_version,
                              spec=self.specs[spec_id], schema=self.schema,
                              output_file=self.table.io.new_output(path),
                              snapshot_id=self.snapshot_id, avro_compression=self.compression)

    def _drop(self, remove) -> list:
        """The head's data manifests: as they are where ``remove`` selects none of their
        files, else rewritten with those files' entries marked deleted; one that holds no
        live file any more (all its entries deleted by an earlier snapshot) is left out."""
        manifests = []
        for manifest in data_manifests(self.table, self.head):
            entries = manifest.fetch_manifest_entry(self.table.io, discard_deleted=True)
            if not entries:  # only deleted entries (an earlier rewrite's): no longer listed,
                continue     # as Iceberg's own writers leave them (else they pile up a night)
            drop = [remove(e.data_file.file_path) for e in entries]
            if not any(drop):
                manifests.append(manifest)  # kept as it is
                continue
            with self._manifest_writer(manifest.partition_spec_id) as writer:
                for entry, dropping in zip(entries, drop):
                    if dropping:
                        writer.delete(entry)
                        self.collector.remove_file(entry.data_file, self.schema,
                                                   self.specs[entry.data_file.spec_id])
                    else:
                        writer.existing(entry)
            manifests.append(writer.to_manifest_file())
            self.dropped = True
        return manifests

    def _add(self, files: list):
        """A manifest (of the table's default spec) of the added DataFiles ``files``."""
        from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

        spec_id = self.metadata.default_spec_id
        with self._manifest_writer(spec_id) as writer:
            for f in files:
                writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                   snapshot_id=self.snapshot_id, data_file=f))
                self.collector.add_file(f, self.schema, self.specs[spec_id])
        return writer.to_manifest_file()

    def _manifest_list(self, manifests: list) -> tuple[str, int]:
        """Write the snapshot's manifest list; returns its path and sequence number."""
        from pyiceberg.manifest import write_manifest_list

        sequence_number = self.metadata.next_sequence_number()
        path = self.table.location_provider().new_metadata_location(
            f"snap-{self.snapshot_id}-0-{self.commit_uuid}.avro")
        self.written.append(path)
        with write_manifest_list(format_version=self.metadata.format_version,
                                 output_file=self.table.io.new_output(path),
                                 snapshot_id=self.snapshot_id, parent_snapshot_id=self.head,
                                 sequence_number=sequence_number,
                                 avro_compression=self.compression) as writer:
            writer.add_manifests(manifests)
        return path, sequence_number

    def _snapshot(self, manifest_list: tuple[str, int]):
        """The snapshot, its summary the collected totals over the parent's and ours."""
        from pyiceberg.table.snapshots import (Operation, Snapshot, Summary,
                                               update_snapshot_summaries)

        path, sequence_number = manifest_list
        parent = self.metadata.snapshot_by_id(self.head) if self.head is not None else None
        return Snapshot(
            snapshot_id=self.snapshot_id, parent_snapshot_id=self.head, manifest_list=path,
            sequence_number=sequence_number, schema_id=self.metadata.current_schema_id,
            summary=update_snapshot_summaries(
                Summary(operation=Operation.OVERWRITE if self.dropped else Operation.APPEND,
                        **self.collector.build(), **self.summary),
                parent.summary if parent is not None else None))

    def _commit(self, snapshot) -> None:
        """Add ``snapshot`` and move the branch to it, if the branch is still at the head
        this writer read (else the catalog refuses); updates the table in place."""
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.update import (AddSnapshotUpdate, AssertRefSnapshotId,
                                            AssertTableUUID, SetSnapshotRefUpdate)

        from spark_jobs.warehouse import _pyiceberg

        _pyiceberg.do_commit(
            self.table,
            (AddSnapshotUpdate(snapshot=snapshot),
             SetSnapshotRefUpdate(ref_name=self.ref, type=SnapshotRefType.BRANCH,
                                  snapshot_id=self.snapshot_id, parent_snapshot_id=self.head)),
            (AssertTableUUID(uuid=self.metadata.table_uuid),
             AssertRefSnapshotId(ref=self.ref, snapshot_id=self.head)))


def commit_snapshot(table, ref: str, *, add: list, remove, summary: dict) -> int | None:
    """One compare-and-swap commit of a snapshot on branch ``ref`` of ``table``: the
    branch head's live files that ``remove`` (a path predicate) selects are dropped and
    the DataFiles ``add`` added (:class:`SnapshotWriter`). Returns the new head, or the
    head as it was where there is nothing to drop or add (no commit). Raises
    :class:`.errors.CommitRefused` where the branch moved since ``table`` was loaded,
    :class:`.errors.CommitFailed` where the commit failed otherwise; updates ``table`` in
    place."""
    return SnapshotWriter(table, ref, summary).write(add=add, remove=remove)


#: footers read at once by :func:`data_files` (on S3 each is a GET)
FOOTER_READERS = 16


def data_files(table, paths: list[str]) -> list:
    """The ``DataFile`` of each Parquet file in ``paths`` (written for ``table``), as
    pyiceberg's ``parquet_file_to_data_file`` makes it: the footer read (``FOOTER_READERS``
    at a time), the file's schema checked against the table's, the statistics and
    partition from the footer. The schema check, the statistics plan and the column
    mapping are made once per call, the check once per distinct file schema, instead of
    once per file: a night of thousands of small partitions commits thousands of files
    of one schema, and the check was 60% of the time (docs/bench_job.md)."""
    import concurrent.futures

    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (compute_statistics_plan,
                                      data_file_statistics_from_parquet_metadata,
                                      parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    from spark_jobs.warehouse import _pyiceberg

    metadata = table.metadata
    schema, spec = metadata.schema(), metadata.spec()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)

    def footer(path: str):
        input_file = table.io.new_input(path)
        with input_file.open() as stream:
            return pq.read_metadata(stream), len(input_file)

    with concurrent.futures.ThreadPoolExecutor(max(1, min(FOOTER_READERS, len(paths)))) as pool:
        footers = list(pool.map(footer, paths))
    # the file schemas found compatible: a list, since a pyarrow schema's hash and == leave
    # out the fields' metadata, where Parquet keeps the field ids
    checked: list = []
    out = []
    for path, (footer_metadata, size) in zip(paths, footers):
        arrow_schema = footer_metadata.schema.to_arrow_schema()
        if not any(arrow_schema.equals(c, check_metadata=True) for c in checked):
            _pyiceberg.check_file_schema(schema, arrow_schema, metadata.format_version)
            checked.append(arrow_schema)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer_metadata, stats_columns=plan, parquet_column_mapping=mapping)
        out.append(DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
            partition=statistics.partition(spec, schema), file_size_in_bytes=size,
            sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None,
            key_metadata=None, **statistics.to_serialized_dict()))
    return out


def rewrite_manifests(table, rewrite, *, summary: dict, branch: str = MAIN) -> None:
    """One snapshot on ``branch`` of ``table`` that adds and drops no data file, its
    manifests what ``rewrite(manifests, entries, new_writer)`` makes of the head's
    (:func:`._pyiceberg.rewrite_manifests`, pyiceberg's own fast append extended). A
    compare-and-swap on the branch: :class:`.errors.CommitRefused` where it moved
    (:func:`.commits.send`)."""
    from spark_jobs.warehouse import _pyiceberg

    summary = {**summary, **commits.new_token()}

    def commit():
        with table.transaction() as tx:
            _pyiceberg.rewrite_manifests(tx, table.io, rewrite, summary=summary, branch=branch)

    commits.send(table, commit, landed=commits.token_landed(summary))
