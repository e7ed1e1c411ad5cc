"""Where things are in a broker's log directory, the segment manifest and the names of
the warehouse's tables: one place for the Airflow planner (kafkalog_pipeline), the UI
plugin and the jobs. Imports nothing heavy (DAG files import it).

A log directory holds one folder per partition, named as the broker names it,
``<topic>-<partition>`` (a topic is Kafka's ``[A-Za-z0-9._-]``, at most 249
characters), holding ``<20-digit base offset>.log`` segments and their index
files beside them (:data:`INDEX_SUFFIXES`). Snapshots may nest log directories at
any depth (``<night>/<broker>/<topic>-<partition>/...``).

A segment manifest (the planner's chunks, the job's ``--input``) is JSON:
``{"segments": [{"uri": ..., "size": ..., "etag": ..., "mtime": ..., "night": ...,
"index": ..., "timeindex": ..., "txnindex": ...} or "a URI", ...], "chunk_id": K,
"state_files": ["a URI", ...]}``; all but ``uri`` are optional (the job looks up what is
missing; ``night``, the snapshot night whose listing held the segment (:func:`night`), is
recorded in the ledger). ``state_files`` lists partition state files (:data:`STATE_FILE_KEY`) for the job
to read; a directory or prefix input has them found beside the segments instead.

A partition folder's state files (``kafkalog.state_files`` reads them): producer-state
snapshots ``<20-digit offset>.snapshot``, ``leader-epoch-checkpoint`` and
``partition.metadata``.

Kafka renames a partition folder ``<topic>-<partition>.<32 hex digits>-delete`` (deleted,
awaiting removal), ``-future`` (a move between the broker's log directories in flight) or
``-stray`` (no longer assigned here): such a folder is read as its topic
(:data:`RENAMED_SUFFIXES`; records say which in ``folder_state``).

A log directory's own files (:data:`LOG_DIR_FILE_KEY`, :func:`parse_log_dir_key`):
``meta.properties``, ``.kafka_cleanshutdown``, the four offset checkpoints and
``bootstrap.checkpoint`` at its top, ``quorum-state`` and KRaft snapshots in its
``__cluster_metadata-0/``. A manifest lists them under ``"log_dir_files": [{"uri": ...,
"night": ...}, ...]`` (each log directory's in one chunk of a run); a directory or prefix
input has them found beside the partition folders.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

#: the suffixes of a partition folder Kafka renamed (LocalLog: ``<topic>-<partition>.<32 hex
#: digits><suffix>``; their meaning: kafkalog.folders, whose FOLDER_SUFFIXES a test holds
#: these to): the folder still holds that partition's data and is read as its topic
RENAMED_SUFFIXES = ("-delete", "-future", "-stray")
_TOPIC = (r"(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>\d+)"
          r"(?:\.[0-9a-f]{32}(?:" + "|".join(RENAMED_SUFFIXES) + r"))?")
#: a partition folder's name (live or renamed)
PARTITION_DIR = re.compile(_TOPIC)
#: a partition folder and a segment file, at any depth
SEGMENT_KEY = re.compile(r"(?:^|/)" + _TOPIC + r"/(?P<base>\d{20})\.log$")
#: the index files a segment may have beside it (a manifest entry names them by these
#: without the dot)
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
SEGMENT_SUFFIX = ".log"
#: what the grammar says, for messages
GRAMMAR = "<topic>-<partition>/<20-digit base offset>.log"
#: a partition folder's state file, at any depth: ``name`` is the file name
STATE_FILE_KEY = re.compile(r"(?:^|/)" + _TOPIC + r"/(?P<name>\d{20}\.snapshot|"
                            r"leader-epoch-checkpoint|partition\.metadata)$")
STATE_GRAMMAR = ("<topic>-<partition>/{<20-digit offset>.snapshot, leader-epoch-checkpoint, "
                 "partition.metadata}")

#: a log directory's own files (issue 36; kafkalog.log_dir and kafkalog.kraft read them, and
#: a test holds these names to theirs): at its top, and in its ``__cluster_metadata-0/``.
#: The log directory is the folder holding the partition folders, as listed.
LOG_DIR_TOP_FILES = ("meta.properties", ".kafka_cleanshutdown",
                     "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                     "log-start-offset-checkpoint", "cleaner-offset-checkpoint",
                     "bootstrap.checkpoint")
CLUSTER_METADATA_FOLDER = "__cluster_metadata-0"
LOG_DIR_FILE_KEY = re.compile(
    r"(?:^|/)(?P<name>" + "|".join(re.escape(n) for n in LOG_DIR_TOP_FILES) + r"|"
    + re.escape(CLUSTER_METADATA_FOLDER) + r"/(?:quorum-state|\d{20}-\d{10}\.checkpoint(?:\.deleted)?))$")
LOG_DIR_GRAMMAR = ("<log dir>/{" + ", ".join(LOG_DIR_TOP_FILES) + "}, <log dir>/"
                   + CLUSTER_METADATA_FOLDER + "/{quorum-state, <20-digit offset>-<10-digit epoch>"
                   ".checkpoint[.deleted]}")

#: the warehouse's tables (namespace ``kafka`` by default; columns: spark_jobs.schemas)
TABLE_NAMES = ("records", "batches", "markers", "findings", "ledger", "dq_results")
#: the tables a decode run writes, in publish order (ledger last: it is what later runs trust)
DECODE_TABLES = TABLE_NAMES[:5]
#: tables derived from Kafka's internal topics and the partitions' state files (issue 19,
#: docs/tables.md): created by the first run that has rows for them, and then published
#: with the run's other tables (before the ledger). ``consumer_lag`` is the audit's, like
#: dq_results.
#: Issue 36 adds the log directory's own files (broker_state, partition_checkpoints,
#: kraft_snapshots, quorum_state) and ``__share_group_state``; issue 34 the tier's
#: ``remote_segments`` (from ``__remote_log_metadata``).
#: Those a decode run writes:
DERIVED_TABLES = ("consumer_offsets", "group_metadata", "transactions", "cluster_metadata",
                  "producer_state", "leader_epochs", "broker_state", "partition_checkpoints",
                  "kraft_snapshots", "quorum_state", "share_group_state", "remote_segments",
                  "producer_transactions", "streams_groups")
#: those the audit writes
AUDIT_DERIVED_TABLES = ("consumer_lag",)
INTERNAL_TABLES = DERIVED_TABLES + AUDIT_DERIVED_TABLES


def night(value) -> str:
    """A snapshot night as the warehouse writes it (the ledger's and dq_results' ``night``):
    ``YYYY-MM-DD``, from such a text, a date or a datetime (its date); ValueError otherwise."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return value.isoformat()
    text = str(value).strip()
    try:
        return dt.date.fromisoformat(text).isoformat() if len(text) == 10 else _bad_night(text)
    except ValueError:
        return _bad_night(text)


def _bad_night(text: str):
    raise ValueError(f"{text!r} is not a night (YYYY-MM-DD)")


def run_night(nights, default: str | None = None) -> str | None:
    """The night of a run: the latest of ``nights`` (its segments' or its ledger rows'
    ``YYYY-MM-DD``; None and empty ones are no night), else ``default`` (the job's
    ``--night``, or None)."""
    return max((n for n in nights if n), default=None) or default


def topic_matcher(patterns: str | Iterable[str] | None):
    """A predicate over topic names from comma-separated fnmatch patterns ('' or '*' = all)."""
    if patterns is None:
        items = []
    elif isinstance(patterns, str):
        items = [p.strip() for p in patterns.split(",")]
    else:
        items = [str(p).strip() for p in patterns]
    items = [p for p in items if p]
    if not items or "*" in items:
        return lambda topic: True
    return lambda topic: any(fnmatch.fnmatchcase(topic, p) for p in items)


class ManifestError(ValueError):
    """A segment manifest that cannot be read."""


def parse_segment_key(key: str) -> tuple[str, int, int] | None:
    """``(topic, partition, base offset)`` of a segment's key, path or URI, else None."""
    m = SEGMENT_KEY.search(key)
    if m is None:
        return None
    return m["topic"], int(m["partition"]), int(m["base"])


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` of a partition folder's name, else None."""
    m = PARTITION_DIR.fullmatch(name)
    return (m["topic"], int(m["partition"])) if m else None


def is_log(key: str) -> bool:
    """Whether an object is meant as a segment (its name may still not parse)."""
    return key.endswith(SEGMENT_SUFFIX)


def index_key(segment_key: str, suffix: str) -> str:
    """The key of a segment's index file with ``suffix``."""
    return segment_key[:-len(SEGMENT_SUFFIX)] + suffix


def parse_state_key(key: str) -> tuple[str, int, str] | None:
    """``(topic, partition, file name)`` of a partition state file's key, path or URI."""
    m = STATE_FILE_KEY.search(key)
    return (m["topic"], int(m["partition"]), m["name"]) if m else None


def parse_log_dir_key(key: str) -> tuple[str, str] | None:
    """``(log dir, file name)`` of a log directory's own file (:data:`LOG_DIR_FILE_KEY`) by
    its key, path or URI, else None. The log dir is the key before the file (``""`` for a
    file at the listing's root); the name of a KRaft file keeps its folder
    (``__cluster_metadata-0/quorum-state``)."""
    m = LOG_DIR_FILE_KEY.search(key)
    if m is None:
        return None
    return key[:m.start("name")].rstrip("/"), m["name"]


def manifest(entries: list[dict], chunk_id: int | None = None,
             state_files: list[str] | None = None,
             log_dir_files: list[dict] | None = None) -> bytes:
    """A segment manifest's bytes (``log_dir_files``: ``{"uri", "night"}`` each)."""
    doc: dict = {"segments": entries}
    if chunk_id is not None:
        doc["chunk_id"] = chunk_id
    if state_files:
        doc["state_files"] = list(state_files)
    if log_dir_files:
        doc["log_dir_files"] = list(log_dir_files)
    return json.dumps(doc, indent=1).encode()


#: the decode job's flag naming a submission's chunk (spark_jobs/decode/cli.py)
CHUNK_ID_FLAG = "--chunk-id"
#: the flag naming a tiered-storage tier (``s3://bucket/prefix``: the plugin's ``key.prefix``
#: under a bucket) on the decode job's and the audit's command lines (issue 34, docs/tiered.md)
TIERED_STORAGE_FLAG = "--tiered-storage"
#: the environment variable naming a folder of PKCS#8 PEM private keys, the tier's key ring
#: (key id = file name without ``.pem``); never a command-line argument
TIER_KEYS_ENV = "KAFKALOG_TIER_KEYS"
#: the internal topic whose segments say which remote segments are live
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"


@dataclass(frozen=True)
class ChunkSpec:
    """One decode submission of a run: one chunk's manifest, decoded into the run's branch.

    :meth:`argv` renders the arguments ``spark_jobs.decode_segments`` parses
    (spark_jobs/decode/cli.py) in one order, so the planner never spells them by hand;
    :meth:`map_index_template` names a mapped decode task by its chunk, reading the chunk id
    from those arguments by its flag (not by a position)."""

    input: str  # the chunk's manifest URI
    output: str  # the warehouse root
    run_id: str
    chunk_id: int
    catalog: str
    namespace: str
    reprocess: bool = False
    s3_endpoint: str | None = None
    more: tuple[str, ...] = ()  # further arguments (the Schema Registry's)
    tiered_storage: str | None = None  # the tier the chunk also reads (TIERED_STORAGE_FLAG)
    latest_topics: str | None = None  # LATEST_TOPICS_FLAG's regular expression
    cdc_topics: str | None = None  # CDC_TOPICS_FLAG's

    def argv(self) -> list[str]:
        """The job's arguments: the chunk, decoded into the run's branch (``--no-publish``:
        the DAG audits, then publishes)."""
        args = ["--input", self.input, "--output", self.output, "--run-id", self.run_id,
                CHUNK_ID_FLAG, str(self.chunk_id), "--no-publish",
                "--catalog", self.catalog, "--namespace", self.namespace]
        if self.reprocess:
            args.append("--reprocess")
        if self.s3_endpoint:
            args += ["--s3-endpoint", self.s3_endpoint]
        if self.tiered_storage:
            args += [TIERED_STORAGE_FLAG, self.tiered_storage]
        if self.latest_topics:
            args += [LATEST_TOPICS_FLAG, self.latest_topics]
        if self.cdc_topics:
            args += [CDC_TOPICS_FLAG, self.cdc_topics]
        return args + list(self.more)

    @staticmethod
    def map_index_template(args: str = "task.application_args") -> str:
        """An Airflow ``map_index_template`` naming a decode task ``chunk <id>``: ``args`` is
        the Jinja expression of the task's argv, which holds :meth:`argv`."""
        return f"chunk {{{{ {args}[{args}.index('{CHUNK_ID_FLAG}') + 1] }}}}"


def read_manifest_state_files(data: bytes, where: str) -> list[str]:
    """The state-file URIs a manifest lists (none by default)."""
    try:
        doc = json.loads(data)
        found = doc.get("state_files", []) if isinstance(doc, dict) else []
        if not isinstance(found, list) or not all(isinstance(u, str) for u in found):
            raise ValueError(f"state_files is not a list of URIs: {found!r}")
    except ValueError as err:
        raise ManifestError(f"{where} is not a segment manifest: {err}") from err
    return found


def read_manifest_log_dir_files(data: bytes, where: str) -> list[dict]:
    """The log directories' own files a manifest lists (none by default): ``{"uri",
    "night"}`` each (a plain URI: night null)."""
    try:
        doc = json.loads(data)
        found = doc.get("log_dir_files", []) if isinstance(doc, dict) else []
        out = [{"uri": e, "night": None} if isinstance(e, str) else
               {"uri": e["uri"], "night": e.get("night")} for e in found]
        if not all(isinstance(e["uri"], str) for e in out):
            raise ValueError("an entry's uri is not a string")
    except (ValueError, KeyError, TypeError) as err:
        raise ManifestError(f"{where} is not a segment manifest: log_dir_files is not a list "
                            f"of URIs or {{\"uri\", \"night\"}}: {err}") from err
    return out


def read_manifest(data: bytes, where: str) -> list[dict]:
    """A manifest's entries, each a dict with at least ``uri``."""
    try:
        doc = json.loads(data)
        entries = doc["segments"] if isinstance(doc, dict) else doc
        out = [{"uri": e} if isinstance(e, str) else dict(e) for e in entries]
        for e in out:
            if not isinstance(e.get("uri"), str):
                raise ValueError(f"an entry has no uri: {e!r}")
    except (ValueError, KeyError, TypeError) as err:
        raise ManifestError(f"{where} is not a segment manifest "
                            f'({{"segments": [...]}}): {err}') from err
    return out


#: typed per-topic tables (issue 20, docs/tables.md "Typed tables"): one table per topic whose
#: values carry an Avro, JSON Schema or Protobuf schema, named ``values__<escaped topic>`` in the namespace.
#: A topic may hold ``.`` (Iceberg's namespace separator) and ``_``; the escaping is a
#: prefix-free code, so it is reversible and two topics never share a table (Kafka's own
#: ``a.b`` / ``a_b`` metric clash does not happen here): ``_`` -> ``__``, ``.`` -> ``_dot_``;
#: ``-`` and alphanumerics stay. ``shop.orders`` -> ``values__shop_dot_orders``,
#: ``my_topic`` -> ``values__my__topic``.
TYPED_PREFIX = "values__"


# ---- the warehouse's folders: W/<table>/... and W/_staging, W/_scratch, W/data_docs -----------
#: under a table's location: its data files and its Iceberg metadata
DATA_FOLDER, METADATA_FOLDER = "data", "metadata"
#: under the warehouse root: a run's manifests and schemas before its tasks read them, a run's
#: files before they are deduplicated, a run's Data Docs (each ``<folder>/<run token>/``)
STAGING, SCRATCH, DATA_DOCS = "_staging", "_scratch", "data_docs"


def table_folder(location: str, folder: str = DATA_FOLDER) -> str:
    """A folder under a table's ``location``: its data files (default) or its metadata."""
    return f"{location.rstrip('/')}/{folder}"


def run_folder(folder: str, token: str) -> str:
    """A run's folder (``token``: its run token) under :data:`STAGING`, :data:`SCRATCH` or
    :data:`DATA_DOCS`, relative to the warehouse root, without a trailing slash."""
    return f"{folder}/{token}"


def chunk_manifest_key(token: str, chunk_id: int) -> str:
    """Where the plan writes chunk ``chunk_id``'s segment manifest (under the warehouse root)."""
    return f"{run_folder(STAGING, token)}/_manifests/chunk-{chunk_id}.json"


def _escaped(prefix: str, topic: str) -> str:
    return prefix + topic.replace("_", "__").replace(".", "_dot_")


def _unescaped(prefix: str, name: str) -> str | None:
    if not name.startswith(prefix):
        return None
    rest, out, i = name[len(prefix):], [], 0
    while i < len(rest):
        if rest[i] != "_":
            out.append(rest[i])
            i += 1
        elif rest.startswith("__", i):
            out.append("_")
            i += 2
        elif rest.startswith("_dot_", i):
            out.append(".")
            i += 5
        else:
            return None
    topic = "".join(out)
    return topic if re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic) else None


def typed_table_name(topic: str) -> str:
    """The typed table of ``topic``."""
    return _escaped(TYPED_PREFIX, topic)


def typed_topic(name: str) -> str | None:
    """The topic whose typed table is ``name``, else None (not a typed table's name)."""
    return _unescaped(TYPED_PREFIX, name)


#: per-key state tables (issue 35, docs/tables.md "Latest per key", "Change data capture"):
#: ``latest__<escaped topic>`` (a compacted topic's latest committed record per key) and
#: ``cdc__<escaped topic>`` (a Debezium topic's source table); escaped as the typed tables
#: are. The kinds, by prefix:
LATEST, CDC = "latest", "cdc"
KEYED_PREFIXES = {LATEST: "latest__", CDC: "cdc__"}
#: the decode job's flags naming topics for them by a regular expression
LATEST_TOPICS_FLAG, CDC_TOPICS_FLAG = "--latest-topics", "--cdc-topics"
#: the tag of a keyed table's state as of a night (``night-YYYY-MM-DD``)
NIGHT_TAG_PREFIX = "night-"


def keyed_table_name(kind: str, topic: str) -> str:
    """The per-key state table of ``kind`` (:data:`LATEST`, :data:`CDC`) for ``topic``."""
    return _escaped(KEYED_PREFIXES[kind], topic)


def latest_table_name(topic: str) -> str:
    """``latest__<escaped topic>``."""
    return keyed_table_name(LATEST, topic)


def cdc_table_name(topic: str) -> str:
    """``cdc__<escaped topic>``."""
    return keyed_table_name(CDC, topic)


def keyed_table(name: str) -> tuple[str, str] | None:
    """``(kind, topic)`` of a per-key state table's name, else None."""
    for kind, prefix in KEYED_PREFIXES.items():
        topic = _unescaped(prefix, name)
        if topic is not None:
            return kind, topic
    return None


def night_tag(night: str) -> str:
    """The tag of a keyed table's state as of ``night``."""
    return NIGHT_TAG_PREFIX + night


#: a file of a partition folder (a segment, a state file) as the log directory that holds it:
#: its URI up to the partition folder (``<log dir>/<partition folder>/<file>``), the
#: ``log_dir`` of the log directory's tables (broker_state, partition_checkpoints); a regular
#: expression in Java's and Python's common syntax, group 1 the log directory
LOG_DIR_OF_FILE = r"^(.*)/[^/]+/[^/]+$"
