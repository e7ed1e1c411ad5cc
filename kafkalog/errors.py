"""One error hierarchy for kafkalog.

Every error the package raises is a :class:`KafkaLogError`. Errors about bad
input bytes also subclass :class:`ValueError`, so callers that only know the
builtins still catch them. Low-level errors (``struct.error``, ``IndexError``,
codec library errors) are translated into these at one boundary in
``log_reader`` (``raise ... from err``); nothing else escapes.

Messages name the byte position and, where two values disagree, both values.
"""

from __future__ import annotations


class KafkaLogError(Exception):
    """Base class of every error raised by kafkalog."""


class CorruptDataError(KafkaLogError, ValueError):
    """Bytes that cannot be what the format says they are.

    ``position`` is the absolute byte position (in the source) of the entry
    or structure that failed, or ``None`` where it is not known.
    """

    kind = "corrupt_batch"

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class CorruptBatchError(CorruptDataError):
    """A batch (v2) or message (v0/v1) whose fields contradict each other."""


class CrcMismatchError(CorruptBatchError):
    """Raised by ``Batch.ensure_valid()`` when the stored CRC does not match."""

    kind = "crc_mismatch"


class DecompressionError(CorruptDataError):
    """A compressed payload that its codec cannot decompress."""

    kind = "decompression_error"


class UnknownCodecError(CorruptDataError):
    """Attributes name a compression codec that does not exist for this magic."""

    kind = "unknown_codec"


class LimitExceededError(CorruptDataError):
    """Input asks for more memory than the caller's :class:`~kafkalog.Limits` allow."""

    kind = "limit_exceeded"


class CodecUnavailableError(KafkaLogError, ImportError):
    """The library for a codec is not installed; the message names the package."""


class SourceError(KafkaLogError, OSError):
    """A source that cannot be opened or read (missing file, bad byte range)."""


# ------------------------------------------------------------------------------------------
# Tiered storage (kafkalog.tiered): a remote segment read through its manifest. Each message
# names the object (path or s3:// URI) and, for chunks, the chunk and its byte positions.

class TieredStorageError(KafkaLogError):
    """A remote (tiered-storage) segment that cannot be read as its manifest says."""


class RemoteObjectError(TieredStorageError, SourceError):
    """An object of the tier that is missing or cannot be read (not found, access refused)."""


class ManifestError(TieredStorageError, CorruptDataError):
    """A ``.rsm-manifest`` that is not valid JSON or does not describe a segment."""

    kind = "remote_manifest_error"


class ChunkError(TieredStorageError, CorruptDataError):
    """A stored chunk that does not give back the original bytes: shorter than the manifest
    says, an AES-GCM tag that does not verify, zstd that does not decompress, or a size
    other than the chunk's. ``position`` is the chunk's position in the original segment."""

    kind = "remote_chunk_error"


class KeyRingError(TieredStorageError):
    """The data key of an encrypted segment cannot be had: no key ring, a key id the ring
    does not hold, a private key that does not unwrap it, or a key file that cannot be read."""
