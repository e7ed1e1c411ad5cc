"""What a night holds, whichever run wrote it: the audited run's rows, and the rows other
runs published of the offsets that are new on the run's night.

A run writes only what the warehouse does not hold yet (the decode deduplicates against
``main``), and skips segments an earlier-published run ingested whole. When nights run in
order that is exactly what is new on the night. When a night runs after later ones (a
backfill of an older night; a night whose publish was refused because a later night got its
offsets in first, run again), the later nights' runs hold some of this night's new offsets,
and the run alone would show holes, or nothing. Here those rows come back into the audit:

* the night's **new range** of a partition is ``(prior end, end]``: past the last offset
  the nights before the run's held (:func:`.context.prior_ends`, by night), up to the last
  offset this run's listing shows (decoded, or carried from earlier runs for a skipped
  segment);
* **other runs' rows** of the run's branch head (``main`` as the run began, plus its own)
  in that range, of a segment the run listed (the same topic, partition and base offset;
  a segment the night lacks stays missing), and at an offset the run has no row of, are
  added, their ``segment`` the URI this night listed it under.

In such a partition what lies at or below the prior end is context, as it is when the
nights run in order (there the run skips or resumes those segments, and the audit carries
their offsets): the run's own rows there are left out (the dedupe kept none of them, or
only what another copy held) and its ledger's decoded ranges up to the prior end stand for
those offsets (:func:`context`).

So the checks see what the night holds, and a night's verdict does not depend on the order
its runs ran in. In order, no other run holds offsets past the prior end and nothing is
read (:func:`borrowed_ranges` is empty, the common case).
"""

from __future__ import annotations

#: the tables whose rows may be borrowed, and the offset column a row's place is
#: (batches: base_offset; a finding: its base_offset where it has one)
OFFSET_COLUMN = {"records": "offset", "batches": "base_offset", "markers": "offset",
                 "findings": "base_offset"}
#: how a borrowed row is told apart from the run's own rows of the same place
KEY = {"records": ("offset",), "batches": ("base_offset",), "markers": ("offset",),
       "findings": ("segment_base_offset", "kind", "position")}


def new_ranges(run_ledger, listed, prior):
    """Per (topic, partition) of the run: ``lo`` (first offset new on the run's nights:
    one past the prior nights' end, else null: from the start) and ``hi`` (the last offset
    its listing shows)."""
    return run_ledger.sparkSession.sql("""
        WITH ends AS (
          SELECT topic, partition, MAX(last_offset) AS hi FROM (
            SELECT topic, partition, last_offset FROM {r}
            UNION ALL SELECT topic, partition, carried_last FROM {s})
          WHERE topic IS NOT NULL GROUP BY topic, partition)
        SELECT e.topic, e.partition, p.prior_last_offset + 1 AS lo, e.hi
        FROM ends e LEFT JOIN {p} p ON p.topic = e.topic AND p.partition = e.partition
        WHERE e.hi IS NOT NULL""", r=run_ledger, s=listed, p=prior)


def borrowed_ranges(ranges, published_ledger, run_id: str) -> list:
    """The new ranges (:func:`new_ranges`) some other run's published ledger rows meet,
    collected: ``[(topic, partition, lo, hi)]`` (empty when the nights ran in order)."""
    return ranges.sparkSession.sql("""
        SELECT DISTINCT g.topic, g.partition, g.lo, g.hi
        FROM {g} g JOIN {l} l ON l.topic = g.topic AND l.partition = g.partition
        WHERE l.run_id <> :run AND l.last_offset IS NOT NULL
          AND l.last_offset >= COALESCE(g.lo, l.last_offset) AND l.first_offset <= g.hi
        ORDER BY g.topic, g.partition""", g=ranges, l=published_ledger,
                args={"run": run_id}).collect()


def row_filter(borrowed):
    """A pyiceberg filter of the files that may hold rows of the ``borrowed`` partitions."""
    from pyiceberg.expressions import And, EqualTo, Or

    parts = [And(EqualTo("topic", t), EqualTo("partition", p)) for t, p, _, _ in borrowed]
    out = parts[0]
    for part in parts[1:]:
        out = Or(out, part)
    return out


def borrow(name: str, head, own, borrowed, run_ledger, run_id: str):
    """Rows of table ``name`` at the run's branch head (``head``: every run's rows there)
    that other runs wrote in the ``borrowed`` ranges, of segments the run listed, at places
    the run's own rows (``own``) do not hold; ``segment`` as the run listed it."""
    spark = head.sparkSession
    ranges = _ranges_frame(spark, borrowed)
    col = OFFSET_COLUMN[name]
    key = " AND ".join(f"o.{k} <=> h.{k}" for k in KEY[name])
    in_range = f"h.{col} >= COALESCE(g.lo, h.{col}) AND h.{col} <= g.hi"
    if name == "findings":  # one without offsets: of the bytes of the object the night listed
        in_range = f"(({in_range}) OR (h.{col} IS NULL AND h.position < s.object_size))"
    columns = ", ".join(f"h.`{c}`" if c != "segment" else "s.segment AS segment"
                        for c in head.columns)
    return spark.sql(f"""
        WITH listed AS (  -- one URI a segment (several brokers' copies: the first)
          SELECT topic, partition, segment_base_offset, MIN(segment) AS segment,
                 MAX(object_size) AS object_size
          FROM {{l}} GROUP BY topic, partition, segment_base_offset)
        SELECT {columns}
        FROM {{h}} h
        JOIN {{g}} g ON g.topic = h.topic AND g.partition = h.partition
        JOIN listed s ON s.topic = h.topic AND s.partition = h.partition
                     AND s.segment_base_offset = h.segment_base_offset
        LEFT ANTI JOIN {{o}} o ON o.topic = h.topic AND o.partition = h.partition AND {key}
        WHERE h.run_id <> :run AND {in_range}""", h=head, g=ranges, l=run_ledger, o=own,
                args={"run": run_id})


def _ranges_frame(spark, borrowed):
    return spark.createDataFrame([tuple(b) for b in borrowed],
                                 "topic string, partition int, lo bigint, hi bigint")


def above(name: str, own, borrowed):
    """The run's own rows of table ``name`` but those at or below the prior end of a
    ``borrowed`` partition (context there: :func:`context`); findings are all kept."""
    if name == "findings":
        return own
    spark = own.sparkSession
    last = "last_offset" if name == "batches" else OFFSET_COLUMN[name]
    return spark.sql(f"""
        SELECT o.* FROM {{o}} o LEFT ANTI JOIN {{g}} g
          ON g.topic = o.topic AND g.partition = o.partition AND o.{last} < g.lo""",
                o=own, g=_ranges_frame(spark, borrowed))


def context(run_ledger, borrowed):
    """Rows for :func:`.context.listed_segments`' frame (``carried_last``) standing for the
    offsets up to the prior end that the run's decoded ledger rows of the ``borrowed``
    partitions hold: the segment from its base offset to the last of them."""
    spark = run_ledger.sparkSession
    return spark.sql("""
        SELECT l.topic, l.partition, l.segment, l.segment_base_offset,
               LEAST(l.last_offset, g.lo - 1) AS carried_last
        FROM {l} l JOIN {g} g ON g.topic = l.topic AND g.partition = l.partition
        WHERE l.action IN ('decoded', 'redecoded', 'resumed') AND l.first_offset IS NOT NULL
          AND l.first_offset < g.lo""", l=run_ledger, g=_ranges_frame(spark, borrowed))
