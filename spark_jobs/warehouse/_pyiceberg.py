"""Every pyiceberg private the project relies on, in one module, for one pyiceberg release.

A private name (``_do_commit``, ``_FastAppendFiles``, ...) or an error text may change in any
release without notice. So, as an Airflow provider keeps every version-dependent import in its
``version_compat.py``, no other module of the project imports a pyiceberg private or calls
one on a pyiceberg object: they call the helpers here. Each says why the private is needed and
which public API would replace it; an upgrade of pyiceberg checks this module and widens
:data:`SUPPORTED`. Importing it under another pyiceberg release line raises ``ImportError``.

Imported lazily, inside the functions that commit (as pyiceberg itself is everywhere in
``spark_jobs``): importing pyiceberg takes seconds, and a reader of the tables (the Airflow
plugin) needs none of this.
"""

from __future__ import annotations

import copy
import os
import re
import threading

import pyiceberg

#: the pyiceberg release line the privates below were checked against (requirements.lock
#: pins pyiceberg==0.12.0)
SUPPORTED = (0, 12)


def _release_line(version: str) -> tuple[int, ...]:
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else ()


if _release_line(pyiceberg.__version__) != SUPPORTED:
    raise ImportError(
        f"spark_jobs.warehouse supports pyiceberg {SUPPORTED[0]}.{SUPPORTED[1]}.x only "
        f"(requirements.lock pins 0.12.0), not the installed {pyiceberg.__version__}: install "
        f"'pyiceberg~={SUPPORTED[0]}.{SUPPORTED[1]}.0', or check every private in "
        f"{__name__} against the new release first")

# after the version check: the privates below may not exist in another release
from pyiceberg.catalog import Catalog  # noqa: E402
from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible  # noqa: E402  (private)
from pyiceberg.schema import assign_fresh_schema_ids  # noqa: E402
from pyiceberg.table.snapshots import Operation  # noqa: E402
from pyiceberg.table.update.snapshot import _FastAppendFiles  # noqa: E402  (private)


def do_commit(table, updates: tuple, requirements: tuple) -> None:
    """Send ``updates`` under ``requirements`` to ``table``'s catalog as one commit (a
    ``CommitFailedException`` where a requirement does not hold); ``table`` is updated in
    place.

    Private: ``Table._do_commit``. It is the one commit path of pyiceberg's own
    ``Transaction``: the public ``Catalog.commit_table``, then the table-UUID check, the
    clean-up of old metadata files (``write.metadata.delete-after-commit.enabled``, through
    the private ``Catalog._delete_old_metadata``) and the update of the ``Table`` object. Our
    hand-made commits (:mod:`.snapshots`) taking it too means every commit of a table, ours
    or pyiceberg's, goes through one call (tests/spark_jobs/test_faults.py crashes a process there).
    Public replacement: ``Catalog.commit_table`` plus the clean-up, once pyiceberg makes that
    public, or a public ``Transaction`` method that takes updates and requirements as they
    are (``Transaction._apply`` keeps one requirement of a kind)."""
    table._do_commit(updates, requirements)


def iceberg_schema(schema):
    """Arrow ``schema`` (no field ids) as an Iceberg schema with the fresh field ids
    ``create_table`` would give it.

    Private: ``Catalog._convert_schema_if_needed`` (pyiceberg's Arrow conversion without
    field ids, ``io.pyarrow._ConvertToIcebergWithoutIDs``). A partition spec names its
    source columns by field id, so a table made partitioned needs its schema's ids before
    it exists; ``create_table`` converts an Arrow schema itself, but only after it took the
    spec. Public replacement: a public conversion without ids, or partition fields named
    by column at creation (today ``UpdateSpec.add_identity(name)``, a second commit)."""
    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))


def check_file_schema(table_schema, file_schema, format_version: int) -> None:
    """Raise ``ValueError`` where Parquet files of Arrow schema ``file_schema`` cannot be
    added to a table of Iceberg schema ``table_schema`` (a column missing, another type).

    Private: ``io.pyarrow._check_pyarrow_schema_compatible``, the check pyiceberg's
    ``parquet_file_to_data_file`` (and ``add_files``) makes on every file.
    :func:`.snapshots.data_files` makes it once per distinct file schema instead: a night
    commits thousands of files of one schema, and the check was 60% of the time
    (docs/bench_job.md). Public replacement: ``parquet_file_to_data_file`` per file (the
    cost), or a public form of the check."""
    _check_pyarrow_schema_compatible(table_schema, file_schema, format_version=format_version)


#: pyiceberg 0.12 sends a new snapshot without a check of the table's last sequence number:
#: where another branch's snapshot took the next number in between, the catalog refuses it
#: with this ValueError before writing anything. A lost race, as a failed compare-and-swap
#: is. Private in kind: an error text, not an exception type; it goes where pyiceberg raises
#: ``CommitFailedException`` for it (or requires the last sequence number in the commit).
STALE_SEQUENCE = re.compile(r"Cannot add snapshot with sequence number \d+ older than last "
                            r"sequence number")


def is_stale_sequence(err: BaseException) -> bool:
    """Whether ``err`` is the catalog's refusal of a snapshot beaten to its sequence number
    (:data:`STALE_SEQUENCE`)."""
    return STALE_SEQUENCE.search(str(err)) is not None


class _RewriteManifests(_FastAppendFiles):
    """pyiceberg's fast append of no file, whose manifest list is what ``rewrite`` makes of
    the branch head's manifests (see :func:`rewrite_manifests`)."""

    def __init__(self, *args, rewrite, **kwargs):
        super().__init__(*args, **kwargs)
        self.kafkalog_rewrite = rewrite  # a name of ours: none of pyiceberg's is taken

    def _process_manifests(self, manifests):
        return self.kafkalog_rewrite(
            manifests, lambda m: self.fetch_manifest_entry(m, discard_deleted=True),
            lambda spec_id: self.new_manifest_writer(spec=self.spec(spec_id)))


def rewrite_manifests(transaction, io, rewrite, *, summary: dict, branch: str) -> None:
    """Stage on ``transaction`` one snapshot of ``branch`` that adds and deletes no data
    file (an ``append`` of nothing) and whose manifests are ``rewrite(manifests, entries,
    new_writer)``: ``manifests`` the branch head's, ``entries(m)`` a manifest's live
    entries, ``new_writer(spec_id)`` a manifest writer of this snapshot (entries written
    with ``existing`` keep their snapshot ids and sequence numbers).

    Private: subclassing ``table.update.snapshot._FastAppendFiles`` and overriding its
    ``_process_manifests`` hook (as pyiceberg's own merge append does). pyiceberg 0.12 has
    no rewrite-manifests operation. Public replacement: one like Java's
    ``Table.rewriteManifests()`` (``RewriteManifests.clusterBy``), should pyiceberg add it."""
    _RewriteManifests(operation=Operation.APPEND, transaction=transaction, io=io,
                      snapshot_properties=summary, branch=branch, rewrite=rewrite).commit()


def cache_config_files() -> None:
    """Parse pyiceberg's configuration file once per version of it, not once per ``Config``.

    pyiceberg builds a ``Config`` for every table metadata it reads, every catalog it loads
    and every append (``serializers.table_metadata``, ``Catalog._convert_schema_if_needed``,
    ...), and each reads and parses ``.pyiceberg.yaml`` again with strictyaml (~20 ms, ~80 ms
    on a loaded machine): a night's plan built 47 of them (2-4 s), its audit hundreds. The
    files it would read are the same (``$PYICEBERG_HOME``, the home folder, the working
    directory, searched in its order); a file written anew (another inode, size or mtime:
    :func:`spark_jobs.storage.write_atomically` renames) or another ``PYICEBERG_HOME`` is
    read again, so what pyiceberg sees is what it would have read. The environment's
    ``PYICEBERG_*`` variables are still read by every ``Config`` (not cached).

    Private: ``Config._from_configuration_files`` (a static method; this wraps it, once per
    process). Public replacement: a ``Config`` pyiceberg reuses, or one a caller can pass
    down to its readers, once pyiceberg has one.
    """
    from pyiceberg.utils.config import PYICEBERG_HOME, PYICEBERG_YML, Config

    read = Config._from_configuration_files
    if getattr(read, "kafkalog_cached", False):
        return
    parsed: dict = {}
    lock = threading.Lock()

    def version(directory: str | None):
        if not directory:
            return None
        path = os.path.join(directory, PYICEBERG_YML)
        try:
            st = os.stat(path)
        except OSError:
            return (path, None)
        return (path, st.st_ino, st.st_mtime_ns, st.st_size)

    def from_configuration_files():
        key = tuple(version(d) for d in (os.environ.get(PYICEBERG_HOME), os.path.expanduser("~"),
                                         os.getcwd()))
        with lock:
            found = parsed.get(key, parsed)
        if found is parsed:  # not seen: read as pyiceberg reads it
            found = read()
            with lock:
                parsed[key] = found
        return copy.deepcopy(found)  # Config amends it with the environment's variables

    from_configuration_files.kafkalog_cached = True
    Config._from_configuration_files = staticmethod(from_configuration_files)
