"""``kafkalog dump --txn-stat`` (issue 45): klog's txn-stat counts (tombentley/klog
``TransactionalInfoCollector`` at 0697fbeac55d: commits, aborts, empty transactions, the
open ones at the end, batches and duration per transaction), offline. The segment is
written here with tests/segments.py (the v2 grammar from apache/kafka
``DefaultRecordBatch``/``EndTransactionMarker``, nothing of kafkalog), so each count below
is what the bytes hold by construction."""

from __future__ import annotations

import io
import json

from tests import segments as seg
from kafkalog.cli import build_parser
from kafkalog.cli.txn_stat import partitions, txn_stat

T0 = 1_700_000_000_000
TXN, CONTROL = seg.TRANSACTIONAL, seg.TRANSACTIONAL | seg.CONTROL


def _log() -> bytes:
    out, offset = [], 0

    def data(pid, epoch, n, t):
        nonlocal offset
        out.append(seg.batch_v2([seg.record(i) for i in range(n)], base_offset=offset,
                                attributes=TXN, base_timestamp=t, producer_id=pid,
                                producer_epoch=epoch, base_sequence=0))
        offset += n

    def marker(pid, epoch, commit, t):
        nonlocal offset
        out.append(seg.batch_v2([seg.control_record(1 if commit else 0)], base_offset=offset,
                                attributes=CONTROL, base_timestamp=t, producer_id=pid,
                                producer_epoch=epoch))
        offset += 1

    data(7, 0, 2, T0)            # producer 7: two batches, committed 30 ms after its first
    data(7, 0, 1, T0 + 10)
    marker(7, 0, True, T0 + 30)
    data(8, 3, 1, T0 + 40)       # producer 8: aborted (transaction version 2: epoch 4)
    marker(8, 4, False, T0 + 45)
    marker(9, 0, True, T0 + 50)  # producer 9: a marker that ends no data (empty)
    data(10, 5, 1, T0 + 60)      # producer 10: a stale marker (epoch 4 < 5), still open
    marker(10, 4, True, T0 + 70)
    out.append(seg.batch_v2([seg.record(0)], base_offset=offset, base_timestamp=T0 + 80))
    return b"".join(out)


def main(argv, out) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args, out)


def test_counts_of_a_partition(tmp_path):
    folder = tmp_path / "payments-0"
    folder.mkdir()
    (folder / "00000000000000000000.log").write_bytes(_log())
    assert partitions(str(tmp_path)) == {"payments-0": [str(folder / "00000000000000000000.log")]}
    s = txn_stat(partitions(str(folder))["payments-0"]).summary("payments-0")
    # as klog counts them: the empty transaction's COMMIT is a commit too
    assert (s["commits"], s["aborts"], s["stale_markers"]) == (2, 1, 1)
    assert s["empty"] == [{"producer_id": 9, "producer_epoch": 0, "offset": 6, "type": "COMMIT"}]
    assert [(t["producer_id"], t["first_offset"]) for t in s["open"]] == [(10, 7)]
    assert s["batches_per_txn"] == {"count": 2, "min": 1, "max": 2, "avg": 1.5}
    assert s["duration_ms"] == {"count": 2, "min": 5, "max": 30, "avg": 17.5}

    out = io.StringIO()
    assert main(["dump", "--txn-stat", "--json", str(tmp_path)], out=out) == 0
    assert json.loads(out.getvalue())["commits"] == 2
    out = io.StringIO()
    assert main(["dump", "--txn-stat", str(folder / "00000000000000000000.log")], out=out) == 0
    assert out.getvalue().startswith("payments-0: 2 committed, 1 aborted, 1 empty, 1 open, "
                                     "1 stale markers\n")


def test_a_missing_path_is_an_error(tmp_path):
    out = io.StringIO()
    assert main(["dump", "--txn-stat", str(tmp_path / "nope")], out=out) == 2
    assert out.getvalue() == ""
