"""How the benchmarks read a segment with a client library's decoder."""


def consume(records_cls, name: str, data: bytes) -> int:
    """Read ``data`` as a consumer does with ``records_cls`` (kafka-python's or
    aiokafka's MemoryRecords): every batch's CRC validated, every record's
    offset, timestamp, key, value and headers touched. Returns the record count."""
    n = 0
    mr = records_cls(data)
    while True:
        b = mr.next_batch()
        if b is None:
            return n
        if not b.validate_crc():
            raise SystemExit(f"{name}: CRC mismatch in the benchmark file")
        for r in b:
            r.offset, r.timestamp, r.key, r.value, r.headers
            n += 1
