"""The names of the ``sink_reconcile`` check and its classes (issue 44): a leaf module, so
that the audit's registry and the policy name them without importing Spark code."""

from __future__ import annotations

CHECK = "sink_reconcile"
MISSING, DUPLICATE, ABORTED_LEAK, BEYOND_LOG, VALUE_MISMATCH = (
    "missing", "duplicate", "aborted_leak", "beyond_log", "value_mismatch")
NOT_YET_DELIVERED, COMPACTED_AWAY, BEFORE_LOG_START = (
    "not_yet_delivered", "compacted_away", "before_log_start")
MISSING_KEY, STALE_VALUE, DELETED_KEY_PRESENT = "missing_key", "stale_value", "deleted_key_present"
#: an append sink's classes (:mod:`.compare`)
APPEND_CLASSES = (MISSING, DUPLICATE, ABORTED_LEAK, BEYOND_LOG, VALUE_MISMATCH,
                  NOT_YET_DELIVERED, COMPACTED_AWAY, BEFORE_LOG_START)
#: an upsert sink's classes (:mod:`.upsert`)
UPSERT_CLASSES = (MISSING_KEY, STALE_VALUE, DELETED_KEY_PRESENT, DUPLICATE, BEYOND_LOG)
#: every class, each once
CLASSES = tuple(dict.fromkeys(APPEND_CLASSES + UPSERT_CLASSES))
