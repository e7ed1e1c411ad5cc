"""The ``crc`` check: batches whose stored CRC is not the CRC of their bytes.

One observation per such batch (class ``crc_mismatch``), and one per CRC finding of the
decoder without such a batch (an inner v0/v1 message: its wrapper batch may verify), each
with topic, partition, segment and byte position.
"""

from __future__ import annotations

from .inputs import RunFrames
from .observations import as_observations


def crc_failures(batches, findings):
    """Batches whose CRC does not verify, and CRC findings without such a batch
    (an inner v0/v1 message), with topic, partition, segment and position."""
    return as_observations(batches.sparkSession.sql("""
        SELECT 'crc' AS check, topic, partition, 'crc_mismatch' AS class,
               base_offset AS first_offset, last_offset, 1L AS offsets, CAST(NULL AS bigint) AS value,
               segment, position,
               format_string('batch at position %d of %s (offsets %d..%d): stored crc 0x%08x, computed 0x%08x',
                             position, segment, base_offset, last_offset, crc, computed_crc) AS message
        FROM {b} WHERE NOT crc_valid
        UNION ALL
        SELECT 'crc', f.topic, f.partition, 'crc_mismatch', f.base_offset, f.last_offset, 1L, CAST(NULL AS bigint),
               f.segment, f.position, f.message
        FROM {f} f LEFT ANTI JOIN (SELECT * FROM {b} WHERE NOT crc_valid) b
          ON f.topic = b.topic AND f.partition = b.partition AND f.segment = b.segment
             AND f.position = b.position
        WHERE f.kind = 'crc_mismatch'""", b=batches, f=findings))



def observe(run: RunFrames):
    """The ``crc`` observations of ``run``."""
    return crc_failures(run.batches, run.findings)
