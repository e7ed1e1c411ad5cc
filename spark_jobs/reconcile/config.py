"""``expectations/sinks.yaml`` (the nightly audit's default: none configured;
``sinks.example.yaml``: one of each profile): the Kafka->lake sinks to reconcile against the
log (issue 44, docs/sinks.md), and the profiles that say where each sink keeps a record's Kafka place.

One type, :class:`Sink`, read by :func:`load` from a file whose top level is ``sinks:``, a
list of entries::

    sinks:
      - name: orders-lake                # the result's details.sink
        catalog: lake                    # a catalog of .pyiceberg.yaml, or its properties inline
        table: db.orders                 # the Iceberg table identifier
        profile: iceberg-kafka-connect   # iceberg-kafka-connect | redpanda | kafkalog | columns
        topics: ["orders", "orders.*"]   # fnmatch patterns of the topics it carries
        mode: append                     # append | upsert (then key: the column path upserted on)
        compare: none                    # none | key | key_value
        options: {}                      # the profile's options (below)
        columns: {}                      # column paths: the columns profile's, or overrides
        severity: {}                     # class -> pass | warn | fail, over the policy's

A profile (:data:`PROFILES`) resolves to :class:`Columns`: a column path (``a.b`` for a
struct's field) for topic, partition and offset, optional ones for key, value and
timestamp, and where the sink's committed position lives (:class:`Columns.group`: a consumer
group; None: the sink's highest offset). Every profile is taken from its anchor's own source;
docs/sinks.md cites file and commit.

Errors are :class:`SinkConfigError`, one line naming the sink and the key.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_jobs.audit.policy import SEVERITIES

from .classes import CLASSES

_EXPECTATIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "expectations")
#: the nightly audit's default sinks file (configures none) and the example of every profile
DEFAULT_PATH = os.path.join(_EXPECTATIONS, "sinks.yaml")
EXAMPLE_PATH = os.path.join(_EXPECTATIONS, "sinks.example.yaml")
MODES = ("append", "upsert")
COMPARES = ("none", "key", "key_value")


class SinkConfigError(ValueError):
    """The sinks file, or a sink's table, does not fit: one line naming what."""


@dataclass(frozen=True, slots=True)
class Columns:
    """Where a sink keeps a record's Kafka place: column paths (None: the sink has none);
    ``topic_value``: the one topic a table of one topic holds, where no column names it;
    ``group``: the consumer group whose committed offsets are the sink's position (None:
    the window ends at the sink's highest offset); ``position_note``: why, in words."""

    topic: str | None
    partition: str | None
    offset: str | None
    key: str | None = None
    value: str | None = None
    timestamp: str | None = None
    topic_value: str | None = None
    group: str | None = None
    position_note: str = ""

    def paths(self) -> dict[str, str]:
        """{role: column path} of the columns the sink has."""
        return {role: p for role in ("topic", "partition", "offset", "key", "value", "timestamp")
                if (p := getattr(self, role)) is not None}


@dataclass(frozen=True, slots=True)
class Sink:
    """One entry of the sinks file (module docstring)."""

    name: str
    catalog: str | Mapping
    table: str
    profile: str
    topics: tuple[str, ...]
    mode: str = "append"
    key: str | None = None
    compare: str = "none"
    options: Mapping = field(default_factory=dict)
    columns: Columns | None = None
    #: class -> severity for this sink's results, over the policy's ``sink_reconcile``
    severity: Mapping = field(default_factory=dict)

    def grade(self, policy, topic: str | None, cls: str) -> str:
        """The severity of class ``cls`` of this sink at ``topic``: its own ``severity:``
        where it names the class, else the policy's (``sink_reconcile``)."""
        from .classes import CHECK

        return self.severity.get(cls) or policy.severity(topic, CHECK, cls)

    def used_paths(self) -> dict[str, str]:
        """{role: column path} of the columns the reconciliation reads: topic, partition,
        offset; the key where it compares keys, the value where it compares values or
        upserts; the upsert key."""
        c = self.columns
        used = {r: p for r, p in (("topic", c.topic), ("partition", c.partition),
                                  ("offset", c.offset)) if p is not None}
        if self.compare != "none" and c.key:
            used["key"] = c.key
        if (self.compare == "key_value" or self.mode == "upsert") and c.value:
            used["value"] = c.value
        if self.mode == "upsert":
            used["upsert key"] = self.key
        return used

    def carries(self, topic: str) -> bool:
        """Whether ``topic`` matches one of the sink's patterns."""
        return any(fnmatch.fnmatchcase(topic, p) for p in self.topics)


# ------------------------------------------------------------------ profiles
#: apache/iceberg kafka-connect KafkaMetadataTransform: ``field_name`` (default
#: ``_kafka_metadata``) and ``nested`` (default false: flat ``<field_name>_<x>`` columns)
KMT_FIELD_NAME, KMT_NESTED = "_kafka_metadata", False
#: Kafka Connect's default group of a sink connector: ``connect-<connector name>``
CONNECT_GROUP_PREFIX = "connect-"
#: Redpanda Iceberg topics' struct column of a record's Kafka metadata
REDPANDA_STRUCT = "redpanda"


def iceberg_kafka_connect(sink_name: str, options: Mapping) -> Columns:
    """The Iceberg sink with KafkaMetadataTransform: topic, partition, offset, timestamp
    (no key, no value: give them in ``columns`` to compare). Options: ``field_name``,
    ``nested``, ``connector`` (default the sink's name) or ``group``."""
    name = str(options.get("field_name", KMT_FIELD_NAME))
    nested = options.get("nested", KMT_NESTED)
    if not isinstance(nested, bool):
        raise SinkConfigError(f"sink {sink_name}: options.nested: {nested!r} is not true or false")
    path = (lambda f: f"{name}.{f}") if nested else (lambda f: f"{name}_{f}")
    group = options.get("group") or CONNECT_GROUP_PREFIX + str(options.get("connector", sink_name))
    return Columns(path("topic"), path("partition"), path("offset"), timestamp=path("timestamp"),
                   group=str(group),
                   position_note=f"committed offsets of consumer group {group}")


def redpanda(sink_name: str, options: Mapping, topics: tuple[str, ...]) -> Columns:
    """A Redpanda Iceberg topic's table: the ``redpanda`` struct (partition, offset,
    timestamp, key; no topic: the table is the one topic's) and ``value`` (the schemaless
    table's raw value). No data position: the window ends at the highest offset."""
    topic = options.get("topic") or (topics[0] if len(topics) == 1 and not
                                     any(ch in topics[0] for ch in "*?[") else None)
    if topic is None:
        raise SinkConfigError(f"sink {sink_name}: a redpanda table holds one topic: give "
                              "topics: [<its name>] or options.topic")
    s = REDPANDA_STRUCT
    return Columns(None, f"{s}.partition", f"{s}.offset", key=f"{s}.key",
                   value=options.get("value", "value"), timestamp=f"{s}.timestamp",
                   topic_value=str(topic),
                   position_note="Redpanda keeps no data position (redpanda.commit-metadata is a "
                                 "control offset): the window ends at the sink's highest offset")


def kafkalog(sink_name: str, options: Mapping) -> Columns:
    """Another kafkalog warehouse's ``records`` (a DR copy)."""
    return Columns("topic", "partition", "offset", key="key", value="value",
                   timestamp="timestamp",
                   position_note="a copy's records: the window ends at its highest offset")


def explicit(sink_name: str, columns: Mapping) -> Columns:
    """The ``columns`` profile: paths for topic (or ``topic_value``), partition, offset,
    optional key, value, timestamp; ``group`` where a consumer group is its position."""
    missing = [r for r in ("partition", "offset") if not columns.get(r)]
    if not columns.get("topic") and not columns.get("topic_value"):
        missing.insert(0, "topic")
    if missing:
        raise SinkConfigError(f"sink {sink_name}: profile columns needs columns.{missing[0]} "
                              "(a sink without partition and offset columns, such as Tableflow's "
                              "tables, cannot be reconciled by offset)")
    group = columns.get("group")
    return Columns(columns.get("topic"), columns["partition"], columns["offset"],
                   columns.get("key"), columns.get("value"), columns.get("timestamp"),
                   columns.get("topic_value"), group,
                   f"committed offsets of consumer group {group}" if group else
                   "no consumer group given: the window ends at the sink's highest offset")


PROFILES = ("iceberg-kafka-connect", "redpanda", "kafkalog", "columns")
_COLUMN_KEYS = ("topic", "partition", "offset", "key", "value", "timestamp", "topic_value",
                "group")


def resolve(sink_name: str, profile: str, options: Mapping, topics: tuple[str, ...],
            columns: Mapping) -> Columns:
    """The :class:`Columns` of a profile; ``columns`` override its paths (key, value ...)."""
    if profile == "iceberg-kafka-connect":
        base = iceberg_kafka_connect(sink_name, options)
    elif profile == "redpanda":
        base = redpanda(sink_name, options, topics)
    elif profile == "kafkalog":
        base = kafkalog(sink_name, options)
    elif profile == "columns":
        return explicit(sink_name, columns)
    else:
        raise SinkConfigError(f"sink {sink_name}: unknown profile {profile!r} "
                              f"(one of {', '.join(PROFILES)})")
    over = {k: v for k, v in columns.items() if v}
    if "group" in over:
        over["position_note"] = f"committed offsets of consumer group {over['group']}"
    return Columns(**{**{f: getattr(base, f) for f in Columns.__slots__}, **over})


# ------------------------------------------------------------------ the file
def parse(doc, where: str = "sinks file") -> list[Sink]:
    """The sinks of a parsed document (``{"sinks": [...]}``)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("sinks"), list):
        raise SinkConfigError(f"{where}: the top level needs a 'sinks:' list")
    out, names = [], set()
    for i, entry in enumerate(doc["sinks"]):
        out.append(parse_sink(entry, f"{where}: sinks[{i}]"))
        if out[-1].name in names:
            raise SinkConfigError(f"{where}: sink {out[-1].name}: the name is used twice")
        names.add(out[-1].name)
    return out


def _need(entry: Mapping, key: str, where: str):
    value = entry.get(key)
    if value in (None, "", [], {}):
        raise SinkConfigError(f"{where}: needs '{key}'")
    return value


def parse_sink(entry, where: str) -> Sink:
    """One entry of ``sinks:``."""
    if not isinstance(entry, Mapping):
        raise SinkConfigError(f"{where}: an entry is a mapping (name, catalog, table, profile, topics)")
    name = str(_need(entry, "name", where))
    where = f"sink {name}"
    unknown = sorted(set(entry) - {"name", "catalog", "table", "profile", "topics", "mode", "key",
                                   "compare", "options", "columns", "severity"})
    if unknown:
        raise SinkConfigError(f"{where}: unknown key {unknown[0]!r}")
    catalog = _need(entry, "catalog", where)
    if not isinstance(catalog, (str, Mapping)):
        raise SinkConfigError(f"{where}: catalog is a catalog's name or a mapping of its properties")
    topics = _need(entry, "topics", where)
    topics = (topics,) if isinstance(topics, str) else tuple(str(t) for t in topics)
    mode = entry.get("mode", "append")
    if mode not in MODES:
        raise SinkConfigError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    key = entry.get("key")
    if mode == "upsert" and not key:
        raise SinkConfigError(f"{where}: mode upsert needs 'key' (the column path it upserts on)")
    compare = entry.get("compare", "none")
    if compare not in COMPARES:
        raise SinkConfigError(f"{where}: compare {compare!r} is not one of {', '.join(COMPARES)}")
    options = entry.get("options") or {}
    columns = entry.get("columns") or {}
    for k, v in (("options", options), ("columns", columns)):
        if not isinstance(v, Mapping):
            raise SinkConfigError(f"{where}: {k} is a mapping")
    bad = sorted(set(columns) - set(_COLUMN_KEYS))
    if bad:
        raise SinkConfigError(f"{where}: columns.{bad[0]} is not one of {', '.join(_COLUMN_KEYS)}")
    severity = entry.get("severity") or {}
    if not isinstance(severity, Mapping):
        raise SinkConfigError(f"{where}: severity is a mapping (class: pass | warn | fail)")
    for cls, grade in severity.items():
        if cls not in CLASSES:
            raise SinkConfigError(f"{where}: severity.{cls}: not a class of sink_reconcile "
                                  f"({', '.join(CLASSES)})")
        if grade not in SEVERITIES:
            raise SinkConfigError(f"{where}: severity.{cls}: {grade!r} is not one of "
                                  f"{', '.join(SEVERITIES)}")
    profile = str(_need(entry, "profile", where))
    cols = resolve(name, profile, options, topics, columns)
    if compare != "none" and cols.key is None:
        raise SinkConfigError(f"{where}: compare {compare} needs a key column (columns.key)")
    if compare == "key_value" and cols.value is None:
        raise SinkConfigError(f"{where}: compare key_value needs a value column (columns.value)")
    if mode == "upsert" and cols.value is None:
        raise SinkConfigError(f"{where}: mode upsert needs a value column (columns.value)")
    return Sink(name, catalog, str(_need(entry, "table", where)), profile, topics, mode,
                key and str(key), compare, dict(options), cols,
                {str(k): str(v) for k, v in severity.items()})


def load(path: str | None = None) -> list[Sink]:
    """The sinks of the YAML file ``path`` (default ``expectations/sinks.yaml``)."""
    import yaml

    path = path or DEFAULT_PATH
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as err:
        raise SinkConfigError(f"sinks file {path}: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise SinkConfigError(f"sinks file {path}: not YAML: {' '.join(str(err).split())}") from err
    return parse(doc, f"sinks file {path}")


def check_columns(sink: Sink, have: set[str]) -> None:
    """Every column path the reconciliation reads (:meth:`Sink.used_paths`) is in ``have`` (the table's field paths,
    ``a.b`` for a struct's field): else one line naming the first that is not."""
    for role, p in sink.used_paths().items():
        if p not in have:
            raise SinkConfigError(f"sink {sink.name}: table {sink.table} has no column {p!r} "
                                  f"({role}, profile {sink.profile})")
