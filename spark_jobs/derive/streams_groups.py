"""``streams_groups``: each Kafka Streams group (KIP-1071) as of the night (issue 45).

Streams groups' records land in ``group_metadata`` (``record``: the spec's name without
``Key``; ``key_json``/``value_json`` as Kafka's JSON converter shows them). A group's state
is the replay of its records in ``__consumer_offsets`` order: the newest record of each
key (record type and key) wins, a tombstone removes it (the coordinator's
``GroupCoordinatorShard.replay``). A row per group gives its epoch
(``StreamsGroupMetadata``), its topology (``StreamsGroupTopology``: epoch and
subtopologies), and its members (``StreamsGroupMemberMetadata``) with their assignment
(``StreamsGroupCurrentMemberAssignment``: epochs, state, active/standby/warm-up tasks).

The decode job rebuilds it, on the driver, in a run that wrote Streams group records: from
every ``group_metadata`` row the run's branch holds (every night), written with the run's
``night``; a night's rows are the whole state then, as ``remote_segments``' are.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import layout, schemas
from spark_jobs.derive.step import Output, Submission

TABLE = "streams_groups"
METADATA, TOPOLOGY = "StreamsGroupMetadata", "StreamsGroupTopology"
MEMBER, ASSIGNMENT = "StreamsGroupMemberMetadata", "StreamsGroupCurrentMemberAssignment"
RECORDS = (METADATA, TOPOLOGY, MEMBER, ASSIGNMENT)


def _load(text):
    return json.loads(text) if text else {}


def _tasks(value: dict, name: str) -> str:
    return json.dumps(value.get(name) or [], sort_keys=True)


def build(group_metadata: pa.Table, night: str | None = None, run_id: str | None = None) -> pa.Table:
    """The ``streams_groups`` rows of ``group_metadata``'s Streams group records (see the
    module's text)."""
    rows = group_metadata.filter(pc.is_in(group_metadata.column("record"), pa.array(RECORDS)))
    latest: dict = {}
    for r in sorted(rows.select(["group", "record", "tombstone", "key_json", "value_json",
                                 "source_partition", "source_offset"]).to_pylist(),
                    key=lambda r: (r["source_partition"], r["source_offset"])):
        key = (r["group"], r["record"], r["key_json"])
        if r["tombstone"]:
            latest.pop(key, None)
        else:
            latest[key] = r
    groups: dict = {}
    for (group, record, key_json), r in latest.items():
        g = groups.setdefault(group, {"members": {}})
        value = _load(r["value_json"])
        if record == METADATA:
            g["epoch"] = value.get("epoch")
        elif record == TOPOLOGY:
            g["topology_epoch"] = value.get("epoch")
            g["topology_json"] = json.dumps(value.get("subtopologies") or [], sort_keys=True)
        else:
            member = _load(key_json).get("memberId")
            g["members"].setdefault(member, {"member_id": member})[record] = value
    out = []
    for group in sorted(groups):
        g = groups[group]
        members = []
        for member_id in sorted(g["members"], key=lambda m: (m is None, m or "")):
            m = g["members"][member_id]
            meta, assigned = m.get(MEMBER) or {}, m.get(ASSIGNMENT) or {}
            members.append({
                "member_id": member_id, "client_id": meta.get("clientId"),
                "client_host": meta.get("clientHost"), "instance_id": meta.get("instanceId"),
                "process_id": meta.get("processId"), "topology_epoch": meta.get("topologyEpoch"),
                "member_epoch": assigned.get("memberEpoch"), "state": assigned.get("state"),
                "active_tasks": _tasks(assigned, "activeTasks"),
                "standby_tasks": _tasks(assigned, "standbyTasks"),
                "warmup_tasks": _tasks(assigned, "warmupTasks")})
        out.append({"group": group, "epoch": g.get("epoch"),
                    "topology_epoch": g.get("topology_epoch"),
                    "topology_json": g.get("topology_json"), "members": members,
                    schemas.NIGHT: night, "run_id": run_id})
    return pa.Table.from_pylist(out, schema=schemas.TABLES[TABLE])


def derive(sub: Submission) -> Output:
    """After the run's commit: where the submission wrote Streams group records
    (``sub.files``' ``group_metadata``), the groups as of the branch, as of the run's night:
    ``({TABLE: files}, {TABLE: rows})``, which the decode job commits; nothing elsewhere."""
    from spark_jobs import tables
    from spark_jobs.parquet import PartWriter, write_schema
    from spark_jobs.warehouse import branch_name

    wh = sub.wh
    mine = [tables.read_file(p, "group_metadata", wh.s3)
            for p in sub.files.get("group_metadata", [])]
    if not any(pc.any(pc.is_in(t.column("record"), pa.array(RECORDS))).as_py() for t in mine):
        return {}, {}
    night = layout.run_night((s.night for s in sub.segments), sub.night)
    rows = build(tables.read_arrow(wh, "group_metadata", ref=branch_name(sub.run_id)), night,
                 sub.run_id)
    writer = PartWriter(sub.ctx, "streams", {TABLE: wh.data_root(TABLE)})
    writer.write(TABLE, "", rows.cast(write_schema(TABLE)))
    return {TABLE: writer.commit().get(TABLE, [])}, {TABLE: rows.num_rows}


__all__ = ["RECORDS", "TABLE", "build", "derive"]
