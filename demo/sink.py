"""The demo's Kafka->lake sink (issue 44, docs/sinks.md): an Iceberg table in the shape of
Apache Iceberg's Kafka Connect sink with its ``KafkaMetadataTransform`` SMT, in a catalog of
the demo's own, which the nightly audit reconciles against the log (check
``sink_reconcile``).

The shape is the SMT's default, flat columns: apache/iceberg
``kafka-connect/kafka-connect-transforms/src/main/java/org/apache/iceberg/connect/transforms/KafkaMetadataTransform.java``
at commit ``fe86930dca2a47b7570837e9279bb0eab485148c`` (``field_name`` default
``_kafka_metadata``, ``nested`` default false): ``_kafka_metadata_topic`` (string),
``_kafka_metadata_partition`` (int32), ``_kafka_metadata_offset`` (int64),
``_kafka_metadata_timestamp`` (int64), beside the record's own fields.

It carries the topic ``shipments`` (:mod:`demo.schemas`: four Protobuf values, the same on
both nights), its rows the shipments themselves, their offsets and timestamps read from the
demo's own segment, with one planted fault: offset :data:`DUPLICATE` is held twice, as a
replayed commit after a rebalance leaves it (apache/iceberg PR #17713). Its position: the
connector's group ``connect-demo-shipments`` has no commit in the demo's
``__consumer_offsets``, so the window ends at the sink's highest offset (the result says so).

The demo grades that duplicate ``warn`` in its sinks file (a sink's own ``severity:``, over
the policy's ``fail``), so that its nights still publish and the report shows it as one
warning per night.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from . import schemas as demo_schemas

#: the demo's sink: its name, its table, the topic it carries, the offset it holds twice
NAME, TABLE, TOPIC, PARTITION = "demo-shipments", "lake.shipments", "shipments", 0
DUPLICATE = 2
#: under the demo's output folder: its catalog and data, and the sinks file naming it
FOLDER, SINKS_FILE, CATALOG = "sink", "sinks.yaml", "demo_sinks"


def rows(snapshot_night: Path) -> pa.Table:
    """The sink's rows: each record of ``shipments-0`` in ``snapshot_night`` (the demo's own
    segment, read with kafkalog) as the shipment it is, with the SMT's columns; offset
    :data:`DUPLICATE` twice."""
    import kafkalog

    records = []
    for log in sorted((snapshot_night / f"{TOPIC}-{PARTITION}").glob("*.log")):
        t = kafkalog.decode(log).records
        ms = pa.compute.cast(pa.compute.cast(t.column("timestamp"), pa.timestamp("ms", "UTC")),
                             pa.int64())  # the SMT's timestamp: the record's, epoch millis
        records += zip(t.column("offset").to_pylist(), ms.to_pylist())
    records += [r for r in records if r[0] == DUPLICATE]  # the replayed commit
    shipments = [demo_schemas.shipment(offset) for offset, _ in records]
    return pa.table({
        "id": pa.array([s["id"] for s in shipments], pa.int64()),
        "carrier": pa.array([s["carrier"] for s in shipments], pa.string()),
        "weight_g": pa.array([s["weight_g"] for s in shipments], pa.int32()),
        "_kafka_metadata_topic": pa.array([TOPIC] * len(records), pa.string()),
        "_kafka_metadata_partition": pa.array([PARTITION] * len(records), pa.int32()),
        "_kafka_metadata_offset": pa.array([o for o, _ in records], pa.int64()),
        "_kafka_metadata_timestamp": pa.array([ts for _, ts in records], pa.int64())})


def catalog_properties(out: Path) -> dict[str, str]:
    """The demo sink catalog's pyiceberg properties (a SQLite catalog under ``out``)."""
    folder = out / FOLDER
    return {"name": CATALOG, "type": "sql", "uri": f"sqlite:///{folder / 'catalog.db'}",
            "warehouse": (folder / "lake").as_uri()}


def write(out: Path, snapshots: Path) -> Path:
    """Write the sink's table (anew: the demo is deterministic) and the sinks file naming it
    under ``out``, from the last snapshot night under ``snapshots``; return the file."""
    import yaml
    from pyiceberg.catalog.sql import SqlCatalog

    folder = out / FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "lake").mkdir(parents=True)
    props = catalog_properties(out)
    catalog = SqlCatalog(props["name"], **{k: v for k, v in props.items() if k != "name"})
    catalog.create_namespace(TABLE.split(".")[0])
    last = sorted(p for p in snapshots.iterdir() if p.is_dir())[-1]
    data = rows(last)
    catalog.create_table(TABLE, schema=data.schema).append(data)
    path = out / SINKS_FILE
    path.write_text(
        "# The demo's sink (demo/sink.py): reconciled by each night's audit (docs/sinks.md).\n"
        "# Its planted duplicate warns (severity: over the policy's fail), so that the\n"
        "# demo's nights still publish.\n"
        + yaml.safe_dump({"sinks": [{
            "name": NAME, "catalog": props, "table": TABLE, "profile": "iceberg-kafka-connect",
            "options": {"connector": NAME}, "topics": [TOPIC], "mode": "append",
            "compare": "none", "severity": {"duplicate": "warn"}}]}, sort_keys=False))
    return path


def sinks_file(out: Path) -> Path | None:
    """The sinks file the demo wrote under ``out`` (None: it wrote none)."""
    path = out / SINKS_FILE
    return path if path.is_file() else None
