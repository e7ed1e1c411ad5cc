"""The checks of the decoder's and the decode job's findings (the ``findings`` table).

* ``divergence``: two copies of one offset differ (a copy against what the warehouse held);
* ``replica_divergence``: two brokers' copies of a partition hold other batches at the same
  offsets (:func:`replica_divergences`; which findings these are: :func:`replica_divergence_sql`);
* ``truncated_tail``: a segment ends in an incomplete entry (class ``active_segment`` in the
  partition's newest segment, where a live broker was still writing);
* ``decoder_findings``: every other kind (class = the kind), but ``crc_mismatch`` (the ``crc``
  check's), ``value_decode_error`` (``schema_decode``'s) and ``tier_divergence`` (the tier
  audit's, :mod:`.tier`).
"""

from __future__ import annotations

from spark_jobs.findings import (DIVERGENCE, REPLICA_DIVERGENCE, REPLICA_DIVERGENCE_PREFIX,
                                 TIER_DIVERGENCE)

from .context import newest_segments
from .inputs import RunFrames
from .observations import as_observations


def replica_divergence_sql() -> str:
    """SQL: finding ``f`` is a replica divergence — two brokers' copies of a partition that
    differ (spark_jobs/decode/replicas.py): its own kind, or (rows written before it had one)
    a ``divergence`` finding told apart by its message."""
    return (f"(f.kind = '{REPLICA_DIVERGENCE}' OR (f.kind = '{DIVERGENCE}' AND "
            f"startswith(f.message, '{REPLICA_DIVERGENCE_PREFIX}')))")


def finding_checks(findings, newest_segments):
    """Decoder and job findings: ``divergence``, ``truncated_tail`` (class
    ``active_segment`` in the partition's newest segment of the run, where a
    live broker was still writing) and ``decoder_findings`` (class = kind).
    ``crc_mismatch`` belongs to :func:`.crc.crc_failures`, ``value_decode_error`` to
    :mod:`.schema_decode` (which counts them from ``records``). ``newest_segments``:
    (topic, partition, segment) of each partition's newest segment."""
    return as_observations(findings.sparkSession.sql("""
        SELECT CASE WHEN f.kind IN ('divergence', 'truncated_tail') THEN f.kind
                    ELSE 'decoder_findings' END AS check,
               f.topic, f.partition,
               CASE WHEN f.kind = 'truncated_tail' AND n.segment IS NOT NULL THEN 'active_segment'
                    ELSE f.kind END AS class,
               f.base_offset AS first_offset, f.last_offset, 1L AS offsets,
               f.bytes AS value, f.segment, f.position,
               format_string('%s in %s at %d..%s: %s', f.kind, f.segment, f.position,
                             COALESCE(CAST(f.end AS string), '?'), f.message) AS message
        FROM {f} f LEFT JOIN {n} n ON n.topic = f.topic AND n.partition = f.partition
                                   AND n.segment = f.segment
        WHERE f.kind NOT IN ('crc_mismatch', 'value_decode_error', '""" + TIER_DIVERGENCE + """')
          AND NOT """ + replica_divergence_sql(),
        f=findings, n=newest_segments))


def replica_divergences(findings):
    """``replica_divergence``: the decode job compared the copies of a partition that
    several brokers' folders hold batch by batch and found one holding other batches
    at the same offsets (an unclean leader election, a truncation): one observation per
    ``divergence`` finding it recorded, naming both copies (class ``divergence``).
    Record-level divergences (a copy against what the warehouse held) stay
    :func:`finding_checks`' ``divergence``."""
    return as_observations(findings.sparkSession.sql("""
        SELECT 'replica_divergence' AS check, f.topic, f.partition, 'divergence' AS class,
               f.base_offset AS first_offset, f.last_offset,
               f.last_offset - f.base_offset + 1 AS offsets, f.bytes AS value, f.segment,
               f.position, f.message
        FROM {f} f WHERE """ + replica_divergence_sql(), f=findings))


def observe_findings(run: RunFrames):
    """The ``divergence``, ``truncated_tail`` and ``decoder_findings`` observations of ``run``."""
    return finding_checks(run.findings, newest_segments(run.batches, run.ledger))


def observe_replica_divergences(run: RunFrames):
    """The ``replica_divergence`` observations of ``run``."""
    return replica_divergences(run.findings)
