"""Step 4, orphan files: files under a table's ``data/`` folder that no snapshot of any ref
(nor any other snapshot still in the metadata) references, and older than the grace:
output of crashed runs, and files only expired snapshots held. Younger ones are kept: a
running job has written files it has not committed yet. ``W/_scratch/<token>/<attempt>/``
folders whose newest file is older than the grace go too (:func:`clean_scratch`). With
``clean_metadata``, also unreferenced manifests, manifest lists and metadata files under
``metadata/``.

Before deleting anything, the files the catalog names must be found where this step lists
them: where none is, the two spell paths differently and nothing is deleted.
"""

from __future__ import annotations

import datetime as dt
import os

from spark_jobs import storage
from spark_jobs.layout import SCRATCH
from spark_jobs.maintenance.errors import MaintenanceError
from spark_jobs.maintenance.naming import data_folder, metadata_folder
from spark_jobs.warehouse import Warehouse

DEFAULT_ORPHAN_GRACE_HOURS = 72.0


def normalize(uri: str) -> str:
    """One spelling per file: local paths without ``file:``, normalized; ``s3a://`` as ``s3://``."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif uri.startswith("file:"):
        uri = uri[len("file:"):]
    if "://" not in uri:
        return os.path.normpath(uri)
    scheme, rest = uri.split("://", 1)
    return ("s3" if scheme in ("s3a", "s3n") else scheme) + "://" + rest


def referenced_files(table) -> tuple[set[str], set[str]]:
    """``(data files, metadata files)`` (normalized) that any snapshot still in the
    table's metadata references, whatever ref it is on: the live (added or existing)
    entries of its manifests, which are its data files (a file a snapshot deleted is
    live in its parent, if that is kept); the manifest lists, manifests, metadata files
    and statistics files."""
    data, meta = set(), {normalize(table.metadata_location)}
    meta.update(normalize(e.metadata_file) for e in table.metadata.metadata_log)
    for stats in list(table.metadata.statistics) + list(table.metadata.partition_statistics):
        meta.add(normalize(stats.statistics_path))
    seen = set()
    for snap in table.metadata.snapshots:
        meta.add(normalize(snap.manifest_list))
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            meta.add(normalize(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                data.add(normalize(entry.data_file.file_path))
    return data, meta


def remove_orphans(wh: Warehouse, name: str, *, grace: dt.timedelta,
                   now: dt.datetime | None = None, dry_run: bool = False,
                   clean_metadata: bool = False) -> dict:
    """Delete table ``name``'s orphan files (the module's docstring). Returns how many
    files (and bytes) went, and how many were too young to go."""
    out = {"orphans_deleted": 0, "orphan_bytes": 0, "orphans_too_young": 0,
           "orphan_metadata_deleted": 0}
    table = wh.load(name)
    if table is None:
        return out
    cutoff = (now or dt.datetime.now(dt.timezone.utc)) - grace
    data, meta = referenced_files(table)
    out.update(_remove_data_orphans(wh, name, data_folder(table), data, cutoff, dry_run))
    if clean_metadata:
        out["orphan_metadata_deleted"] = _remove_metadata_orphans(
            wh, metadata_folder(table), meta, cutoff, dry_run)
    return out


def _store_and_uri(root: str, config):
    store = storage.open_store(root, config)
    return store, (lambda key: normalize(store.uri(key)))


def _remove_data_orphans(wh: Warehouse, name: str, data_root: str, data: set[str],
                         cutoff: dt.datetime, dry_run: bool) -> dict:
    """Delete the files under ``data_root`` that ``data`` does not name, older than ``cutoff``."""
    store, uri_of = _store_and_uri(data_root, wh.s3)
    listed = list(store.list(""))
    _check_spelling(name, data_root, data, {uri_of(o.key) for o in listed})
    doomed, too_young = [], 0
    for o in listed:
        if uri_of(o.key) in data:
            continue
        if o.mtime >= cutoff:
            too_young += 1
            continue
        doomed.append(o)
    if doomed and not dry_run:
        store.delete([o.key for o in doomed])
        _prune_empty_dirs(store)
    return {"orphans_deleted": len(doomed), "orphan_bytes": sum(o.size for o in doomed),
            "orphans_too_young": too_young}


def _check_spelling(name: str, data_root: str, data: set[str], found: set[str]) -> None:
    """Raise :class:`MaintenanceError` where the catalog names data files under
    ``data_root`` and none of them is among those ``found`` there."""
    under = normalize(data_root).rstrip("/") + "/"
    ours = {p for p in data if p.startswith(under)}
    if ours and not ours & found:
        raise MaintenanceError(
            f"{name}: none of the {len(ours)} data files the catalog references was found "
            f"under {data_root} (e.g. {sorted(ours)[0]}); the paths do not match how this "
            "tool lists them, so no file is deleted")


def _remove_metadata_orphans(wh: Warehouse, metadata_root: str, meta: set[str],
                             cutoff: dt.datetime, dry_run: bool) -> int:
    """Delete the manifests, manifest lists and metadata files under ``metadata_root``
    that ``meta`` does not name, older than ``cutoff``; returns how many."""
    store, uri_of = _store_and_uri(metadata_root, wh.s3)
    gone = [o for o in store.list("")
            if (o.key.endswith(".avro") or ".metadata.json" in o.key)
            and uri_of(o.key) not in meta and o.mtime < cutoff]
    if gone and not dry_run:
        store.delete([o.key for o in gone])
    return len(gone)


def _prune_empty_dirs(store) -> None:
    """Remove the empty folders a local store is left with (S3 has none)."""
    if not isinstance(store, storage.LocalStore):
        return
    for dirpath, _dirs, _files in sorted(os.walk(store.root), key=lambda w: -len(w[0])):
        if dirpath != store.root:
            try:
                os.rmdir(dirpath)
            except OSError:
                pass  # not empty (or gone)


def clean_scratch(wh: Warehouse, *, grace: dt.timedelta, now: dt.datetime | None = None,
                  dry_run: bool = False) -> dict:
    """Delete ``W/_scratch/<token>/<attempt>/`` folders whose newest file is older than
    ``grace`` (a crashed run's output still to be deduplicated)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    store = storage.open_store(wh.root, wh.s3)
    folders: dict[str, list] = {}
    for o in store.list(SCRATCH + "/"):
        parts = o.key.split("/")
        folders.setdefault("/".join(parts[:3] if len(parts) > 3 else parts[:2]), []).append(o)
    old = {k: objs for k, objs in folders.items() if max(o.mtime for o in objs) < now - grace}
    out = {"scratch_folders_deleted": len(old),
           "scratch_files_deleted": sum(map(len, old.values())),
           "scratch_folders_kept": len(folders) - len(old)}
    if old and not dry_run:
        store.delete([o.key for objs in old.values() for o in objs])
        if isinstance(store, storage.LocalStore):
            scratch = storage.LocalStore(store.path(SCRATCH))
            if os.path.isdir(scratch.root):
                _prune_empty_dirs(scratch)
    return out
