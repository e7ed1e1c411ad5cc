"""The warehouse's tables and the write -> audit -> publish protocol of a run
(docs/tables.md): :class:`Warehouse`.

* **A run's commits go to its branch** ``run_<run token>``, made from ``main``;
  the first commit on it removes the run's earlier files (a rerun replaces
  exactly that run's rows). Data files are written by the executors; the driver
  commits them (:meth:`Warehouse.commit_files`), replacing the submission's
  earlier files in the same snapshot.
* **The audit reads the branch**; **publish** moves ``main`` to the branch's
  head (a fast-forward), or, when ``main`` moved since the branch was made,
  re-applies the run's files onto ``main`` in one snapshot after checking that
  none of the snapshots committed meanwhile holds offsets of the same
  topic-partitions (else :class:`ConflictError`, naming the other run). Every
  step is a compare-and-swap in the catalog; a lost race is re-checked and
  tried again (:mod:`.commits`). Publishing again after a crash completes what is left.
* **A copy-on-write rewrite** of files on a run's branch (:meth:`Warehouse.commit_rewrite`)
  is planned at the branch head and planned again at the new head where another writer
  moved it; its new files are deleted only where its commit is known not to have landed.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass

import pyarrow as pa

from spark_jobs import layout, schemas, storage
from spark_jobs.warehouse import commits, ddl, snapshots, tags
from spark_jobs.warehouse.catalog import DEFAULT_CATALOG, DEFAULT_NAMESPACE, load_catalog
from spark_jobs.warehouse.errors import (CommitFailed, CommitRefused, ConflictError, NotAudited,
                                         NothingStaged)
from spark_jobs.warehouse.history import (ancestry, check_overlap, fork_point, is_published,
                                          live_files, published_snapshot, snapshot_summary)
from spark_jobs.warehouse.naming import (AUDITED, CHUNK_ID, FILES, MAIN, PUBLISHED_FROM,
                                         PUBLISHING, ROWS, RUN_ID, STAGE, airflow_summary,
                                         branch_name, is_run_file, publishing_key)
from spark_jobs.warehouse.snapshots import commit_refs, data_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Warehouse:
    """The tables of one warehouse: root ``W`` (data, scratch), catalog and namespace."""

    root: str
    catalog_name: str = DEFAULT_CATALOG
    namespace: str = DEFAULT_NAMESPACE
    s3: storage.S3Config | None = None

    @property
    def catalog(self):
        return load_catalog(self.root, self.catalog_name, self.s3)

    def identifier(self, name: str) -> tuple[str, str]:
        if name not in schemas.TABLES and layout.typed_topic(name) is None \
                and layout.keyed_table(name) is None:
            raise KeyError(f"no warehouse table named {name!r}")
        return (self.namespace, name)

    def load(self, name: str):
        """Table ``name``, or None where it does not exist yet."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier(name))
        except NoSuchTableError:
            return None

    def table(self, name: str, loaded=None):
        """Table ``name``, created (with its empty first snapshot) where missing, and
        brought up to this version's schema, partition spec and properties where an
        earlier version made it (:func:`.ddl.evolve`); ``loaded``: the table as the caller
        has just loaded it (:meth:`load`), not loaded again."""
        table = self.load(name) if loaded is None else loaded
        if table is None and name not in schemas.TABLES:
            raise KeyError(f"typed table {name!r} does not exist yet (Warehouse.typed_table)")
        if table is not None and name in schemas.TABLES:
            table = ddl.evolve(table, name)
        if table is None:
            table = ddl.create_table(self.catalog, self.identifier(name), schemas.TABLES[name],
                                     partitioned=True)
            if table is None:  # another process made it first
                table = self.catalog.load_table(self.identifier(name))
        if table.current_snapshot() is None:
            ddl.add_first_snapshot(table, schemas.TABLES[name] if name in schemas.TABLES
                                   else table.schema().as_arrow())
            table = self.catalog.load_table(self.identifier(name))
        return table

    def typed_table(self, name: str, schema: pa.Schema):
        """Typed table ``name`` (:func:`layout.typed_table_name`; a per-key state table,
        :func:`layout.keyed_table`, is made so too) with at least the columns of
        ``schema``: made where missing (unpartitioned, with its empty first snapshot), else
        evolved by Iceberg's ``union_by_name`` (new columns optional, old rows read null).
        The caller has checked that ``schema`` only adds to the table's columns
        (:mod:`spark_jobs.derive.typed`)."""
        self.identifier(name)
        table = self.load(name)
        if table is None:
            ddl.create_table(self.catalog, self.identifier(name), schema, partitioned=False)
            return self.table(name)
        return ddl.widen(table, name, schema)

    def data_root(self, name: str) -> str:
        """Where the executors write table ``name``'s data files (a storage root)."""
        return layout.table_folder(self.table(name).location())

    def scratch_root(self, run_id: str) -> str:
        """Scratch space of a run under W (output still to be deduplicated)."""
        return f"{self.root.rstrip('/')}/{layout.run_folder(layout.SCRATCH, storage.run_token(run_id))}"

    # ---------------------------------------------------------- run branches

    def run_tables(self) -> tuple[str, ...]:
        """The tables a decode run writes and publishes, in publish order: the decode
        tables, with the derived tables (:data:`schemas.DERIVED_TABLES`), the typed and the
        per-key state tables that exist already before the ledger (a warehouse that never
        saw an internal topic or a state file has none, and pays nothing for them)."""
        existing = self.table_names()  # one listing, not a lookup per table: every run asks
        derived = tuple(n for n in schemas.DERIVED_TABLES if n in existing)
        return (schemas.DECODE_TABLES[:-1] + derived + self.typed_tables(existing)
                + self.keyed_tables(existing) + schemas.DECODE_TABLES[-1:])

    def table_names(self) -> set[str]:
        """The names of the namespace's tables (one catalog listing; none: empty)."""
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            return {ident[-1] for ident in self.catalog.list_tables(self.namespace)}
        except NoSuchNamespaceError:
            return set()

    def typed_tables(self, existing: set[str] | None = None) -> tuple[str, ...]:
        """The typed per-topic tables that exist (:func:`layout.typed_table_name`), sorted;
        ``existing``: a listing already made (:meth:`table_names`)."""
        names = self.table_names() if existing is None else existing
        return tuple(sorted(n for n in names if layout.typed_topic(n) is not None))

    def keyed_tables(self, existing: set[str] | None = None) -> tuple[str, ...]:
        """The per-key state tables that exist (:func:`layout.keyed_table`), sorted."""
        names = self.table_names() if existing is None else existing
        return tuple(sorted(n for n in names if layout.keyed_table(n) is not None))

    def begin_table(self, name: str, run_id: str) -> int:
        """Join (or make) run ``run_id``'s branch on table ``name``, which the run writes
        for the first time (a derived table it has just created); returns the fork point."""
        return self._begin(name, run_id, False)

    def begin_run(self, run_id: str, *, reset: bool, names=None) -> dict[str, int]:
        """Make (``reset``: make again) run ``run_id``'s branch on each table (default
        :meth:`run_tables`); its first commit drops the run's files inherited from ``main``.
        Returns each table's fork point: the ``main`` snapshot the run reads as what is
        already published."""
        names = names or self.run_tables()
        self.complete_interrupted(names)
        bases = {}
        for name in names:
            bases[name] = self._begin(name, run_id, reset)
        return bases

    def complete_interrupted(self, names=None) -> list[str]:
        """Finish the publish of every run that stopped part-way (its publish marker is
        still on the first table): its audit passed and its publish began, and a run that
        begins now must see all of it, or it would take half a run for what is published
        (its records without its ledger: the next night would decode them again).
        ``names`` default: :meth:`run_tables` (a derived table's rows are published with
        the run's). Returns the runs completed; raises where one cannot be
        (:class:`ConflictError`)."""
        names = names or self.run_tables()
        table = self.table(names[0])
        runs = sorted(v for k, v in table.properties.items() if k.startswith(PUBLISHING))
        for run in runs:
            log.warning("run %s stopped part-way through its publish: completing it", run)
            self.publish(run, names)
        return runs

    def _begin(self, name: str, run_id: str, reset: bool) -> int:
        branch = branch_name(run_id)

        def step(attempt: int) -> int:
            table = self.table(name)
            refs = table.refs()
            if branch in refs and not reset:
                return fork_point(table, branch)
            main_id = table.current_snapshot().snapshot_id
            # made, or (reset) moved back to main's head
            commit_refs(table, {branch: (refs[branch].snapshot_id if branch in refs
                                         else None, main_id)})
            # the commit updated ``table`` in place
            inherited = [f for f in live_files(table, main_id) if is_run_file(f.file_path, run_id)]
            if inherited:
                self._commit(name, branch, remove=lambda p: is_run_file(p, run_id), add=[],
                             summary={RUN_ID: run_id, STAGE: "staged", "kafkalog.step": "begin"})
            return main_id

        return commits.retry(f"{name}: could not make branch {branch}", step)

    def commit_files(self, name: str, run_id: str, files: list[str], *, chunk_id: str | None = None,
                     summary: dict | None = None) -> int | None:
        """Commit ``files`` (written for ``run_id``) to the run's branch, replacing what the
        same submission (run, or run and chunk) committed before. Returns the snapshot id."""
        props = {RUN_ID: run_id, STAGE: "staged", FILES: str(len(files)), **airflow_summary(),
                 **(summary or {})}
        if chunk_id is not None:
            props[CHUNK_ID] = chunk_id
        return self._commit(name, branch_name(run_id), add=files, summary=props,
                            remove=lambda p: is_run_file(p, run_id, chunk_id))

    def add_files(self, name: str, run_id: str, files: list[str], *,
                  summary: dict | None = None) -> int | None:
        """Add ``files`` to run ``run_id``'s branch of table ``name``, keeping what is there
        (a step after the submission's commit: its per-key tables' findings)."""
        props = {RUN_ID: run_id, STAGE: "staged", FILES: str(len(files)), **airflow_summary(),
                 **(summary or {})}
        return self._commit(name, branch_name(run_id), add=files, summary=props,
                            remove=lambda p: False)

    def replace_files(self, name: str, run_id: str, drop: list[str], add: list[str], *,
                      parent: int, summary: dict | None = None) -> int | None:
        """One snapshot on run ``run_id``'s branch of table ``name``, whose head must be
        ``parent``: the live files ``drop`` replaced by ``add`` (a copy-on-write rewrite of
        rows, e.g. their transaction state, :mod:`spark_jobs.decode.transactions`).
        :class:`CommitRefused` where the branch moved or a file of ``drop`` is not live
        at ``parent``: the caller reads the branch again and decides again (as
        :meth:`commit_rewrite` does)."""
        table = self.table(name)
        live = {f.file_path for f in live_files(table, parent)}
        gone = set(drop)
        if not gone <= live:
            raise CommitRefused(f"{name}: {len(gone - live)} files to replace are not "
                                f"live at snapshot {parent}")
        props = {RUN_ID: run_id, STAGE: "staged", FILES: str(len(add)), **airflow_summary(),
                 **(summary or {})}
        return self._commit(name, branch_name(run_id), add=add, remove=gone.__contains__,
                            summary=props, parent=parent)

    def commit_rewrite(self, name: str, run_id: str, plan, *, what: str | None = None):
        """A copy-on-write rewrite on run ``run_id``'s branch of table ``name``:
        ``plan(head, attempt)`` reads the branch at snapshot ``head`` and returns a
        :class:`.commits.Rewrite` (the files it wrote, ``add``, to replace the live files
        ``drop``), or anything else where there is nothing to commit (returned as it is).
        Committed in one snapshot whose parent must be ``head``; refused (the branch
        moved: another chunk of the run), the files written are deleted and ``plan`` runs
        again at the new head. A commit that failed otherwise (:class:`CommitFailed`)
        deletes them only where it is known not to have landed. Returns the rewrite's
        ``result``; ``what``: the words of the error where every try was refused."""
        def step(attempt: int):
            head = self.table(name).refs()[branch_name(run_id)].snapshot_id
            got = plan(head, attempt)
            if not isinstance(got, commits.Rewrite):
                return got
            try:
                self.replace_files(name, run_id, got.drop, got.add, parent=head,
                                   summary=got.summary)
            except CommitFailed as err:
                if err.outcome == commits.NOT_COMMITTED:
                    storage.delete_uncommitted(got.add, self.s3)
                raise
            except Exception:  # refused, or failed before anything was sent
                storage.delete_uncommitted(got.add, self.s3)
                raise
            return got.result

        return commits.retry(what or f"{name}: could not rewrite files on run {run_id!r}", step)

    def _commit(self, name: str, ref: str, *, add: list[str], remove, summary: dict,
                parent: int | None = None) -> int | None:
        """One overwrite snapshot on ``ref``: drop the live files ``remove`` selects, add
        ``add`` (paths, or DataFiles); retried after a lost compare-and-swap, unless its
        ``parent`` is given (then :class:`CommitRefused` where ``ref`` is elsewhere)."""
        table = self.table(name)
        added = [f if not isinstance(f, str) else None for f in add]
        paths = [f for f in add if isinstance(f, str)]
        if paths:
            it = iter(data_files(table, paths))
            added = [next(it) if f is None else f for f in added]
        summary = {k: str(v) for k, v in summary.items()}
        summary.setdefault(ROWS, str(sum(f.record_count for f in added)))

        def step(attempt: int) -> int | None:
            # the first try uses the table just loaded, later ones load it again
            t = self.table(name) if attempt else table
            head = t.refs()[ref].snapshot_id if ref in t.refs() else None
            if parent is not None and head != parent:
                raise CommitRefused(f"{ref} moved from {parent} to {head}")
            # (looked up here: a test swaps in pyiceberg's own)
            return snapshots.commit_snapshot(t, ref, add=added, remove=remove, summary=summary)

        if parent is not None:
            return step(0)  # the caller plans again on the branch as it is now
        return commits.retry(f"{name}: could not commit to {ref}", step)

    def staged_snapshot(self, name: str, run_id: str) -> int | None:
        """The head of run ``run_id``'s branch on table ``name`` (None: no branch)."""
        return staged_head(self.load(name), run_id)

    # ---------------------------------------------------------- publish

    def audited_heads(self, run_id: str) -> dict[str, int] | None:
        """``{table: snapshot id}`` the newest audit of run ``run_id`` read (the
        ``kafkalog.audited`` summary of its ``dq_results`` snapshot); None: never audited."""
        table = self.load("dq_results")
        if table is None or table.current_snapshot() is None:
            return None
        for sid in ancestry(table, table.current_snapshot().snapshot_id):
            summary = snapshot_summary(table, sid)
            if summary.get(RUN_ID) == run_id and AUDITED in summary:
                return {name: int(s) for name, s in json.loads(summary[AUDITED]).items()}
        return None

    def check_audited(self, run_id: str, names=None, loaded: dict | None = None) -> None:
        """Raise :class:`NotAudited` unless every branch head of run ``run_id`` is the
        snapshot its newest audit read (a table already published has no branch left);
        ``loaded``: ``{name: table or None}`` as the caller has just loaded them."""
        names = names or self.run_tables()
        heads = self.audited_heads(run_id)
        if heads is None:
            raise NotAudited(f"run {run_id!r} has no audit in {self.namespace}.dq_results: "
                             "audit it (spark_jobs/check_quality.py) before publishing")
        for name in names:
            head = (self.staged_snapshot(name, run_id) if loaded is None
                    else staged_head(loaded[name], run_id))
            if head is not None and heads.get(name) != head:
                raise NotAudited(
                    f"{name}: the head of {branch_name(run_id)} is snapshot {head}, the audit "
                    f"read {heads.get(name)}: the run was written again after its audit; "
                    "audit it again before publishing")

    def publish(self, run_id: str, names=None, *, audited: bool = False) -> dict:
        """Make run ``run_id``'s audited branch the current state of ``main``, table by
        table in ``names`` order (ledger last), each table's branch dropped in the same
        commit. Idempotent: a table already published is left as it is, so publishing
        again after a crash at any point completes the run. ``audited``: refuse
        (:class:`NotAudited`) unless the branches are what the run's newest audit read.
        Returns ``{table: action}``. ``names`` default: :meth:`run_tables`."""
        names = names or self.run_tables()
        loaded = {name: self.load(name) for name in names}  # each table loaded once
        if audited:
            self.check_audited(run_id, names, loaded)
        branch = branch_name(run_id)
        tables = {name: self.table(name, loaded[name]) for name in names}
        marked = publishing_key(run_id) in tables[names[0]].properties
        if not any(branch in t.refs() for t in tables.values()):
            if marked or any(published_snapshot(t, run_id) is not None for t in tables.values()):
                if marked:
                    self._mark(names[0], run_id, False)
                tags.tag_run(self, run_id, names)  # (a publish that stopped before its tags)
                return {name: "published" for name in names}
            raise NothingStaged(f"run {run_id!r} has no branch {branch} and nothing published "
                                f"in catalog {self.catalog_name!r}: nothing to publish")
        # each step's first try uses the table as loaded above (or as its last commit left
        # it: pyiceberg updates the Table in place); a lost compare-and-swap loads it again.
        # The marker goes on with the first table's own step: from then on, the publish
        # is completed by whoever comes next (complete_interrupted)
        out = {}
        for i, name in enumerate(names):
            try:
                out[name], tables[name] = self._publish_table(name, run_id, tables[name],
                                                              mark=i == 0 and not marked)
            except ConflictError:
                if all(action == "nothing" for action in out.values()):
                    self._mark(names[0], run_id, False)  # nothing of it reached main
                raise
        self._mark(names[0], run_id, False, tables[names[0]])
        tags.tag_run(self, run_id, names)  # the per-key tables' state as of the run's night
        return out

    def _mark(self, name: str, run_id: str, on: bool, table=None):
        """Set (``on``) or remove run ``run_id``'s publish marker on table ``name``
        (``table``: as just loaded, for the first try); returns the table as it left it."""
        key = publishing_key(run_id)

        def step(attempt: int):
            t = self.table(name) if table is None or attempt else table
            if (key in t.properties) != on:
                commit_refs(t, {}, properties={key: run_id} if on else None,
                            removed=() if on else (key,))
            return t

        return commits.retry(f"{name}: could not {'set' if on else 'remove'} {key}", step)

    def _publish_table(self, name: str, run_id: str, table=None, *, mark: bool = False):
        """Put run ``run_id``'s branch of table ``name`` on ``main`` and drop the branch;
        ``mark``: set the run's publish marker no later than ``main`` changes (in the same
        commit where it can). Returns the action and the table as it left it."""
        branch = branch_name(run_id)
        marker = {publishing_key(run_id): run_id} if mark else None

        def step(attempt: int):
            nonlocal table, marker
            if attempt:
                log.info("%s: main moved while publishing run %s; checking again", name, run_id)
            table = self.table(name) if table is None or attempt else table
            if marker and publishing_key(run_id) in table.properties:
                marker = None  # set by an earlier try
            ref = table.refs().get(branch)
            if ref is None:
                action = "published" if published_snapshot(table, run_id) is not None else "nothing"
                return action, self._mark(name, run_id, True, table) if marker else table
            head = ref.snapshot_id
            main = table.current_snapshot().snapshot_id
            moves = {branch: (head, None)}  # the branch goes in the table's one commit
            if snapshot_summary(table, head).get(RUN_ID) != run_id:
                action = "nothing"  # the run committed nothing here (a derived table)
            elif is_published(table, head):
                action = "published"  # by an earlier try that stopped before the drop
            elif main == (fork := fork_point(table, branch)):
                action = "nothing" if head == fork else "fast-forward"
                if head != fork:
                    moves[MAIN] = (main, head)
            else:
                check_overlap(table, name, run_id, fork, main, head)
                if marker:  # the re-applied snapshot is a commit of its own: mark first
                    table = self._mark(name, run_id, True, table)
                    marker = None
                mine, replaced = self._branch_changes(table, name, run_id, fork, main, head)
                summary = {**snapshot_summary(table, head), STAGE: "published",
                           PUBLISHED_FROM: str(head)}
                self._commit(name, MAIN, add=mine, summary=summary, parent=main,
                             remove=lambda p: is_run_file(p, run_id) or p in replaced)
                return "re-applied", self._drop_branch(name, branch)
            commit_refs(table, moves, properties=marker)
            return action, table

        return commits.retry(f"{name}: could not publish run {run_id!r}", step)

    @staticmethod
    def _branch_changes(table, name: str, run_id: str, fork: int, main: int, head: int):
        """What run ``run_id``'s branch changed since ``fork``, to re-apply onto ``main``:
        the files it added (its own, and rewrites of earlier runs' files: :meth:`replace_files`)
        and the files of earlier runs it replaced. :class:`ConflictError` where ``main``
        no longer holds one of those (rewritten meanwhile: the run must run again)."""
        base = {f.file_path for f in live_files(table, fork)}
        at_head = live_files(table, head)
        added = [f for f in at_head if is_run_file(f.file_path, run_id) or f.file_path not in base]
        replaced = {p for p in base - {f.file_path for f in at_head} if not is_run_file(p, run_id)}
        gone = replaced - {f.file_path for f in live_files(table, main)}
        if gone:
            raise ConflictError(
                f"{name}: run {run_id!r} rewrote {len(gone)} files that main no longer holds "
                f"(e.g. {sorted(gone)[0]}): run {run_id!r} again, or discard it",
                table=name, files=len(gone))
        return added, replaced

    def _drop_branch(self, name: str, branch: str, table=None):
        """Drop ``branch`` of table ``name`` (``table``: as just loaded, for the first
        try); returns the table as it left it (None: it could not)."""
        def step(attempt: int):
            t = self.table(name) if table is None or attempt else table
            ref = t.refs().get(branch)
            if ref is not None:
                commit_refs(t, {branch: (ref.snapshot_id, None)})
            return t

        return commits.retry(f"{name}: could not drop {branch}", step, exhausted=lambda: None)

    def discard(self, run_id: str, names=None) -> None:
        """Drop run ``run_id``'s branches (its staged, unpublished commits)."""
        names = names or self.run_tables()
        for name in names:
            self._drop_branch(name, branch_name(run_id))

    # ---------------------------------------------------------- direct writes

    def replace_run_rows(self, name: str, run_id: str, rows: pa.Table, summary: dict | None = None,
                         where=None):
        """Replace run ``run_id``'s rows of table ``name`` on ``main`` with ``rows`` in one
        snapshot (the audit's own table, dq_results, is written so); ``where`` (a pyiceberg
        expression): the rows replaced instead of all of the run's."""
        from pyiceberg.expressions import EqualTo

        props = {RUN_ID: run_id, STAGE: "published", ROWS: str(rows.num_rows), **airflow_summary(),
                 **{k: str(v) for k, v in (summary or {}).items()}, **commits.new_token()}
        rows = rows.cast(schemas.TABLES[name])

        def step(attempt: int) -> None:
            table = self.table(name)

            def commit():
                with warnings.catch_warnings():
                    # a run's first write deletes nothing: fine
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    table.overwrite(rows, overwrite_filter=EqualTo("run_id", run_id)
                                    if where is None else where, snapshot_properties=props)

            commits.send(table, commit, landed=commits.token_landed(props))

        commits.retry(f"{name}: could not write run {run_id!r}", step)


def staged_head(table, run_id: str) -> int | None:
    """The head of run ``run_id``'s branch on ``table`` (None: no table, or no branch)."""
    if table is None:
        return None
    ref = table.refs().get(branch_name(run_id))
    return ref.snapshot_id if ref is not None else None
