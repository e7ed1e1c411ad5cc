"""kafkalog.state_writer's log-directory files (the demo writes its broker folder with them):
the bytes Kafka writes, and read back by kafkalog.log_dir as a person reads them."""

from __future__ import annotations

from kafkalog.log_dir import read_file
from kafkalog.state_writer import meta_properties_text, offset_checkpoint_text


def test_offset_checkpoint_text(tmp_path):
    text = offset_checkpoint_text([("orders", 0, 5), ("__consumer_offsets", 12, 20)])
    assert text == "0\n2\norders 0 5\n__consumer_offsets 12 20\n"  # Kafka's CheckpointFile
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    state = read_file(str(path))
    assert not state.findings
    assert [(r["topic"], r["partition"], r["offset"]) for r in state.rows] == [
        ("orders", 0, 5), ("__consumer_offsets", 12, 20)]
    assert offset_checkpoint_text([]) == "0\n0\n"


def test_meta_properties_text(tmp_path):
    text = meta_properties_text("ZGVtby1jbHVzdGVyLWlkLQ", 2, directory_id="ZGVtby1kaXJlY3RvcnktaQ")
    assert text.splitlines()[2:] == ["cluster.id=ZGVtby1jbHVzdGVyLWlkLQ",
                                     "directory.id=ZGVtby1kaXJlY3RvcnktaQ", "node.id=2",
                                     "version=1"]
    path = tmp_path / "meta.properties"
    path.write_text(text)
    state = read_file(str(path))
    assert not state.findings
    assert state.header == {"version": 1, "cluster_id": "ZGVtby1jbHVzdGVyLWlkLQ", "node_id": 2,
                            "directory_id": "ZGVtby1kaXJlY3RvcnktaQ"}
    zk = meta_properties_text("lRaQCIBoRh2xRKLuP9CAQg", 0, version=0)
    path.write_text(zk)
    assert read_file(str(path)).header["node_id"] == 0
