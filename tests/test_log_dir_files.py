"""The readers of a log directory's own files and names (kafkalog.folders, kafkalog.log_dir,
kafkalog.kraft) on inputs written here from Kafka's source: what the seven real
directories (test_log_dirs.py) do not hold, syntax corners, and every fault as a finding."""

from __future__ import annotations

import uuid

import pytest

from kafkalog.folders import DELETE, FUTURE, LIVE, STRAY, parse_partition_folder


# -- partition folder names, made as Kafka's LocalLog makes them ------------------------------

def _kafka_dir_name(topic: str, partition: int, suffix: str, capped: bool) -> str:
    """LocalLog.logDirNameWithSuffixCappedLength (-delete, -stray: the topic cut so that the
    name fits in 255 characters) and logDirNameWithSuffix (-future)."""
    unique_id = str(uuid.uuid4()).replace("-", "")  # java.util.UUID.randomUUID, dashes removed
    full_suffix = f"-{partition}.{unique_id}{suffix}"
    if capped:
        return topic[:min(len(topic), 255 - len(full_suffix))] + full_suffix
    return f"{topic}-{partition}.{unique_id}{suffix}"


@pytest.mark.parametrize("topic", ["orders", "my.topic-v2_x", "__consumer_offsets", "a" * 249])
@pytest.mark.parametrize("partition", [0, 12, 2147483647])
def test_partition_folder_names_as_kafka_makes_them(topic, partition):
    assert parse_partition_folder(f"{topic}-{partition}") == (topic, partition, LIVE)
    future = _kafka_dir_name(topic, partition, "-future", capped=False)
    assert parse_partition_folder(future) == (topic, partition, FUTURE)
    for suffix, state in (("-delete", DELETE), ("-stray", STRAY)):
        name = _kafka_dir_name(topic, partition, suffix, capped=True)
        assert len(name) <= 255
        got = parse_partition_folder(name)
        assert (got.partition, got.state) == (partition, state) and topic.startswith(got.topic)
        # Kafka cuts only topics too long for 255 characters
        assert (got.topic == topic) == (len(topic) + len(name) - len(got.topic) <= 255)


def test_a_long_topic_is_cut_in_delete_and_stray_names():
    name = _kafka_dir_name("t" * 249, 3, "-delete", capped=True)
    # "-3." + 32 hex digits + "-delete" = 42 characters: 213 left for the topic
    assert len(name) == 255 and parse_partition_folder(name) == ("t" * 213, 3, DELETE)
    assert parse_partition_folder("/data/kafka/orders-3/") == ("orders", 3, LIVE)  # a path


@pytest.mark.parametrize("name", [
    "orders", "orders-", "-3", "orders-x", "orders-3-delete", "orders-3.-delete",
    "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f40-delete",     # 31 hex digits
    "orders-3.0C4F9A3E5B7D41E2A8C6F0B1D2E3F405-delete",    # Kafka writes lower case
    "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f405-deleted", "orders-3.0c4f9a3e5b7d41e2a8c6f0b1d2e3f405",
    "or ders-3", "ord/ers-3x", ".-3", "..-3", "orders-2147483648", "t" * 250 + "-0",
    "meta.properties", "00000000000000000000.log", "",
])
def test_names_that_are_no_partition_folder(name):
    assert parse_partition_folder(name) is None
