"""Index files as Kafka brokers write them verify clean; corruption fails, by rule (issue 48).

The segment bytes are built by ``tests/segments.py`` (Kafka's wire grammar, no kafkalog);
the ``.index``/``.timeindex`` entries are computed here from what apache/kafka's brokers do,
read at these commits of github.com/apache/kafka:

* 1.1.1 (4dae083af486eaedd27c69c973c74605bffd416b), ``core/src/main/scala/kafka/log/
  LogSegment.scala``: ``append`` indexes an append, if more than ``indexIntervalBytes`` were
  written since the last entry, as ``offsetIndex.append(firstOffset, physicalPosition)``
  (the position where the append starts) and ``timeIndex.maybeAppend(maxTimestampSoFar,
  offsetOfMaxTimestamp)``; ``recover`` each batch as ``(batch.baseOffset, validBytes)``.
* 2.8.2 (3146c6ff4a24cc24d6039037e99edc8930d1958a): ``LogSegment.append`` as
  ``offsetIndex.append(largestOffset, physicalPosition)``; ``recover`` as
  ``(batch.lastOffset, validBytes)`` with the last offset of the batch with the largest
  timestamp; ``onBecomeInactiveSegment`` adds ``(maxTimestampSoFar, offsetOfMaxTimestampSoFar)``
  at the roll. ``LogValidator.assignOffsetsNonCompressed`` (a producer's append) takes the
  offset of the first record holding the largest timestamp (``offsetOfMaxBatchTimestamp``, per
  record); ``validateMessagesAndAssignOffsetsCompressed`` in place the wrapper's last offset;
  ``Log.analyzeAndValidateRecords`` (a follower's append of fetched batches) the last offset
  of the batch holding it.
* 3.7.0 (2ae524ed625438c5fee89e78648bd73e64a3ada0), ``storage/src/main/java/org/apache/
  kafka/storage/internals/log/LogValidator.java``: for magic 2 ``offsetOfMaxTimestamp =
  offsetCounter.value - 1`` (the append's last offset).
* trunk (1eb7644349cb07139d6a3c1ad1986979647cac99, 4.0 to be): ``LogSegment.append``
  as 2.8.2; ``LogValidator`` and ``UnifiedLog.analyzeAndValidateRecords`` give
  ``shallowOffsetOfMaxTimestamp``, the last offset of the batch that raised the maximum.
* all of them: ``TimeIndex.maybeAppend`` appends only a timestamp above the last entry's
  (its last entry starts as (-1, base offset)); ``OffsetIndex.append`` only a larger offset.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import pytest

import kafkalog
from kafkalog.cli.files import INDEX_READERS, file_type, log_beside
from kafkalog.indexes import OFFSET_ENTRY, TIME_ENTRY

from tests import segments

BASE = 1000  # the segment's base offset
T0 = 1_700_000_000_000
INTERVAL = 150  # index.interval.bytes: most appends here get an entry
DATA = Path(__file__).resolve().parent.parent / "data"


class Entry(NamedTuple):
    """One log entry as written: where, how long, its (offset, timestamp) records."""

    position: int
    size: int
    records: tuple[tuple[int, int], ...]
    kind: str  # "v2", "v1" (one message) or "v1gz" (a gzip wrapper)

    @property
    def first(self) -> int:
        return self.records[0][0]

    @property
    def last(self) -> int:
        return self.records[-1][0]

    @property
    def max_ts(self) -> int:
        return max(ts for _, ts in self.records)


class Append(NamedTuple):
    origin: str  # "producer" (LogValidator) or "follower" (a replica's fetched batches)
    entries: tuple[Entry, ...]


def _v2(offset: int, stamps: list[int]) -> bytes:
    """A v2 batch at ``offset`` of records with these timestamps (the max in the header,
    as ``LogValidator`` sets it)."""
    return segments.batch_v2([segments.record(i, ts - stamps[0]) for i, ts in enumerate(stamps)],
                             base_offset=offset, base_timestamp=stamps[0],
                             max_timestamp=max(stamps))


def _v1_set(offset: int, stamps: list[int]) -> list[bytes]:
    """An uncompressed v1 message set: one log entry per message."""
    return [segments.message(offset + i, b"v1", timestamp=ts) for i, ts in enumerate(stamps)]


def _v1_gzip(offset: int, stamps: list[int]) -> bytes:
    """A gzip v1 wrapper of these messages (inner offsets relative, the wrapper's the last;
    its timestamp the largest, as ``LogValidator`` sets it in place)."""
    inner = [segments.message(i, b"in", timestamp=ts) for i, ts in enumerate(stamps)]
    return segments.wrapper(1, segments.GZIP, segments.gzip, inner, offset + len(stamps) - 1,
                            timestamp=max(stamps))


#: the appends of the segment: (origin, [(kind, timestamps) per log entry]); several hold a
#: batch whose largest timestamp is on its first record, several are multi-batch appends
PLAN = [
    ("producer", [("v1", [T0 + 50, T0 + 10, T0 + 20])]),  # a message set: 3 log entries
    ("producer", [("v1gz", [T0 + 40, T0 + 90, T0 + 60])]),
    ("producer", [("v2", [T0 + 100, T0 + 70, T0 + 80, T0 + 90])]),  # max on the first record
    ("follower", [("v2", [T0 + 120, T0 + 110]), ("v2", [T0 + 150, T0 + 140]),
                  ("v2", [T0 + 130])]),
    ("producer", [("v2", [T0 + 140])]),  # below the maximum so far: no time entry
    ("producer", [("v2", [T0 + 300, T0 + 200, T0 + 250])]),
    ("follower", [("v2", [T0 + 310]), ("v2", [T0 + 305, T0 + 330]), ("v2", [T0 + 320])]),
    ("producer", [("v2", [T0 + 400, T0 + 350])]),
    ("follower", [("v2", [T0 + 390, T0 + 420]), ("v2", [T0 + 410])]),
    ("producer", [("v2", [T0 + 500, T0 + 499, T0 + 498])]),
    ("producer", [("v2", [T0 + 450])]),
]


def build_segment() -> tuple[bytes, list[Append]]:
    data, appends, offset = b"", [], BASE
    for origin, batches in PLAN:
        written = []
        for kind, stamps in batches:
            parts = {"v1": _v1_set, "v1gz": lambda o, s: [_v1_gzip(o, s)],
                     "v2": lambda o, s: [_v2(o, s)]}[kind](offset, stamps)
            if kind == "v1":
                for i, part in enumerate(parts):
                    written.append(Entry(len(data), len(part), ((offset + i, stamps[i]),), kind))
                    data += part
            else:
                written.append(Entry(len(data), len(parts[0]),
                                     tuple((offset + i, ts) for i, ts in enumerate(stamps)), kind))
                data += parts[0]
            offset += len(stamps)
        appends.append(Append(origin, tuple(written)))
    return data, appends


def shallow_max(append: Append, broker: str) -> tuple[int, int]:
    """``(largest timestamp, its offset)`` an append hands ``LogSegment.append``."""
    top, at = -1, -1
    for e in append.entries:
        if append.origin == "follower" or broker == "trunk" or e.kind == "v1gz":
            best = (e.max_ts, e.last)  # the batch's (wrapper's) last offset
        else:  # per record: the first one holding the batch's largest timestamp
            best = max(e.records, key=lambda r: (r[1], -r[0]))[::-1]
        if best[0] > top:
            top, at = best
    if broker == "3.7" and append.origin == "producer" and append.entries[0].kind == "v2":
        at = append.entries[-1].last  # offsetCounter.value - 1
    return top, at


def broker_indexes(appends: list[Append], broker: str) -> tuple[list, list]:
    """``(offset entries, time entries)`` as a ``broker`` ("1.1", "2.8", "3.7", "trunk")
    writes them appending ``appends``, then rolling the segment; "recover-1.1" and
    "recover-2.8": as ``LogSegment.recover`` rebuilds them."""
    offsets, times = [], []
    last_time = (-1, BASE)
    top, top_at = -1, BASE

    def maybe_append_time():
        nonlocal last_time
        if top > last_time[0]:
            assert top_at >= last_time[1]
            times.append((top, top_at))
            last_time = (top, top_at)

    since = 0
    if broker.startswith("recover"):
        for e in (e for a in appends for e in a.entries):
            if e.max_ts > top:
                top, top_at = e.max_ts, e.last
            if e.position - since > INTERVAL:
                offsets.append((e.first if broker == "recover-1.1" else e.last, e.position))
                maybe_append_time()
                since = e.position
    else:
        for a in appends:
            largest, at = shallow_max(a, broker)
            if largest > top:
                top, top_at = largest, at
            if since > INTERVAL:
                o = a.entries[0].first if broker == "1.1" else a.entries[-1].last
                assert not offsets or o > offsets[-1][0]
                offsets.append((o, a.entries[0].position))
                maybe_append_time()
                since = 0
            since += sum(e.size for e in a.entries)
        maybe_append_time()  # onBecomeInactiveSegment
    return offsets, times


def write_files(directory: Path, data: bytes, offsets, times) -> dict[str, Path]:
    name = f"{BASE:020d}"
    files = {s: directory / f"{name}{s}" for s in (".log", ".index", ".timeindex")}
    files[".log"].write_bytes(data)
    files[".index"].write_bytes(b"".join(OFFSET_ENTRY.pack(o - BASE, p) for o, p in offsets))
    files[".timeindex"].write_bytes(b"".join(TIME_ENTRY.pack(t, o - BASE) for t, o in times))
    return files


def verify(files) -> list:
    return (kafkalog.verify_offset_index(kafkalog.read_offset_index(files[".index"]), files[".log"])
            + kafkalog.verify_time_index(kafkalog.read_time_index(files[".timeindex"]),
                                         files[".log"]))


def rule_of(finding) -> str:
    rule = finding.message.rsplit("(rule ", 1)[1].rstrip(")")
    assert rule in kafkalog.INDEX_RULES, finding.message
    return rule


BROKERS = ["1.1", "2.8", "3.7", "trunk", "recover-1.1", "recover-2.8"]


@pytest.mark.parametrize("broker", BROKERS)
def test_indexes_as_a_broker_writes_them_verify_clean(tmp_path, broker):
    data, appends = build_segment()
    entries = [e for a in appends for e in a.entries]
    # the bytes are what PLAN says (read back by kafkalog: positions, offsets, timestamps)
    assert [(b.position, b.base_offset, b.last_offset, b.max_timestamp)
            for b in kafkalog.iter_batches(data)] == [
        (e.position, e.first, e.last, e.max_ts) for e in entries]
    offsets, times = broker_indexes(appends, broker)
    assert len(offsets) >= 5 and len(times) >= 5
    by_position = {e.position: e for e in entries}
    holder = {o: e for e in entries for o, _ in e.records}
    # the shapes issue 48 is about are there (the old check called each one FAILED)
    if broker in ("2.8", "3.7", "trunk"):  # a multi-batch append: its largest offset, its start
        assert any(by_position[p].last != o for o, p in offsets)
    if broker in ("1.1", "recover-1.1"):  # the first offset of an entry of several records
        assert any(by_position[p].first == o != by_position[p].last for o, p in offsets)
    if broker in ("1.1", "2.8"):  # a batch whose largest timestamp is on its first record
        assert any(holder[o].first == o != holder[o].last for _, o in times)
    else:
        assert all(holder[o].last == o for _, o in times)
    # the entries keep Kafka's lookup contract: OffsetIndex.lookup(target) (the largest
    # entry offset at or below it, else position 0) then the log read on from there reaches
    # the target; no record up to a time entry's offset has a larger timestamp
    for target in holder:
        start = max((p for o, p in offsets if o <= target), default=0)
        assert min((e for e in entries if e.position >= start and e.last >= target),
                   key=lambda e: e.position) is holder[target]
    for ts, o in times:
        assert max(t for e in entries for off, t in e.records if off <= o) == ts
    assert verify(write_files(tmp_path, data, offsets, times)) == []


def _entries(path: Path, entry) -> list[tuple]:
    return list(entry.iter_unpack(path.read_bytes()))


def _plant(files, suffix, change):
    entry = OFFSET_ENTRY if suffix == ".index" else TIME_ENTRY
    entries = [list(e) for e in _entries(files[suffix], entry)]
    change(entries, files)
    files[suffix].write_bytes(b"".join(entry.pack(*e) for e in entries))


def _swap(i, j):
    def change(entries, _):
        entries[i], entries[j] = entries[j], entries[i]
    return change


def _set(i, field, value):
    def change(entries, files):
        entries[i][field] = value(entries, files) if callable(value) else value
    return change


def _add(value):
    def change(entries, files):
        entries.append(value(entries, files))
    return change


def _below_its_batch(entries, files):
    """Give the first entry that can take it (above the entry before) the offset before
    the batch at its position."""
    starts = {b.position: b.base_offset for b in kafkalog.iter_batches(files[".log"])}
    k = next(k for k in range(1, len(entries))
             if starts[entries[k][1]] - BASE - 1 > entries[k - 1][0])
    entries[k][0] = starts[entries[k][1]] - BASE - 1


def _tear(files) -> int:
    """Cut the log in the middle of its last batch; that batch's position."""
    data = files[".log"].read_bytes()
    last = list(kafkalog.iter_batches(data))[-1]
    files[".log"].write_bytes(data[:last.position + last.size // 2])
    return last.position


# (what is planted, into which file, how, the rules its findings name)
PLANTED = [
    ("a position off a batch boundary", ".index", _set(2, 1, lambda es, _: es[2][1] + 1),
     {"position_at_batch_start"}),
    ("a position past the end of the data", ".index",
     _add(lambda es, f: [es[-1][0] + 50, f[".log"].stat().st_size + 12]), {"position_in_log"}),
    ("a position at a torn last batch", ".index",
     _add(lambda es, f: [es[-1][0] + 50, _tear(f)]), {"position_in_log"}),
    ("offsets and positions going back", ".index", _swap(2, 3),
     {"offsets_increase", "positions_increase"}),
    ("an offset below the batch at its position", ".index", _below_its_batch,
     {"batch_starts_by_offset"}),
    ("an offset the segment does not hold", ".index",
     _set(-1, 0, lambda es, _: es[-1][0] + 500), {"offset_in_append"}),
    ("an offset of a batch past the next entry's position", ".index",
     _set(1, 0, lambda es, _: es[2][0]), {"offset_in_append", "offsets_increase"}),
    ("timestamps and offsets going back", ".timeindex", _swap(1, 2),
     {"timestamps_do_not_decrease", "offsets_do_not_decrease"}),
    ("a timestamp that is no batch's largest", ".timeindex",
     _set(1, 0, lambda es, _: es[1][0] + 1), {"timestamp_is_batch_max"}),
    ("an offset the segment does not hold", ".timeindex",
     _add(lambda es, _: [es[-1][0] + 1, es[-1][1] + 500]), {"offset_in_segment"}),
]


@pytest.mark.parametrize("broker", ["2.8", "trunk"])
def test_planted_corruption_fails_with_its_rule_named(tmp_path, broker):
    data, appends = build_segment()
    named = set()
    for n, (what, suffix, change, rules) in enumerate(PLANTED):
        files = write_files(tmp_path, data, *broker_indexes(appends, broker))
        assert verify(files) == []
        _plant(files, suffix, change)
        found = [f for f in verify(files) if f.kind == "index_mismatch"]
        assert found and {rule_of(f) for f in found} == rules, (what, suffix, found)
        named |= rules
    # every rule of the offset and time indexes is exercised
    assert named == {r for r in kafkalog.INDEX_RULES if r not in (
        "ends_at_control_record", "ends_at_producers_abort", "first_not_after_last",
        "last_offsets_increase")}  # the .txnindex's: test_indexes.py


def test_the_vendored_broker_files_verify_clean():
    """Every index file of the real broker data (tests/data/real, tests/data/broker-dirs)
    checks out against its segment; an index whose .log is not vendored is an empty
    partition's (its 0-byte .log was not copied), checked against no bytes."""
    checked = entries = leftovers = 0
    for root in (DATA / "real", DATA / "broker-dirs"):
        for path in sorted(root.rglob("*")):
            if not path.is_file() or file_type(str(path)) not in INDEX_READERS:
                continue
            read, verify_index = INDEX_READERS[file_type(str(path))]
            log = Path(log_beside(str(path)))
            index = read(path)
            if not log.exists() and index.entries:
                # a deleted segment's leftover (README.md there: its .log.deleted was gone)
                assert path.name.endswith(".deleted"), path
                leftovers += 1
                continue
            assert verify_index(index, log if log.exists() else b"") == [], path
            checked += 1
            entries += len(index.entries)
    assert checked >= 400 and entries >= 300 and leftovers == 8, (checked, entries, leftovers)


def test_a_multi_batch_append_entry_is_kafkas_not_a_finding():
    """The two shapes of issue 48 in small, from a real segment's batches: an .index entry
    naming the last offset of the batch after the one at its position, and a .timeindex
    entry naming the first record of a batch."""
    log = DATA / "real" / "VolodymyrZee+kafka" / "__consumer_offsets-12" / \
        "00000000000000000000.log"
    batches = list(kafkalog.iter_batches(log))
    a, b = batches[3], batches[4]
    idx = kafkalog.read_offset_index(struct.pack(">ii", b.last_offset, a.position),
                                     base_offset=0)
    assert kafkalog.verify_offset_index(idx, log) == []
    several = next(x for x in batches if x.last_offset > x.base_offset)
    first = max(several.records, key=lambda r: r.timestamp)
    tidx = kafkalog.read_time_index(struct.pack(">qi", several.max_timestamp, first.offset),
                                    base_offset=0)
    assert kafkalog.verify_time_index(tidx, log) == []


def test_a_time_entry_at_an_appends_last_offset_with_an_earlier_batchs_max(tmp_path):
    """Kafka 3.7's leader path hands ``LogSegment.append`` the append's last offset
    (``offsetCounter.value - 1``) with the append's largest timestamp: in a multi-batch
    append whose maximum is in an earlier batch, the entry names a batch that does not hold
    that maximum. It is Kafka's; a timestamp no batch of the append holds is not."""
    first, second = _v2(BASE, [T0 + 100, T0 + 90]), _v2(BASE + 2, [T0 + 50, T0 + 60])
    last = BASE + 3
    files = write_files(tmp_path, first + second, [], [(T0 + 100, last)])
    assert verify(files) == []
    files = write_files(tmp_path, first + second, [], [(T0 + 77, last)])
    assert [rule_of(f) for f in verify(files)] == ["timestamp_is_batch_max"]
    # the earlier batch counts only after the previous entry: here it is that entry's own
    files = write_files(tmp_path, first + second, [], [(T0 + 100, BASE + 1), (T0 + 101, last)])
    assert [rule_of(f) for f in verify(files)] == ["timestamp_is_batch_max"]
