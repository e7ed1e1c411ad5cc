"""Kafka's internal topics and their records, read with Kafka's own message specs.

:mod:`.schema` interprets the JSON specs shipped in ``specs/`` (Apache Kafka 4.3.0's, unchanged,
and the older layouts ``specs/README.md`` names; :mod:`.json_form` reads messages in Kafka's JSON
form with them);
:mod:`.topics` frames the records of ``__consumer_offsets``, ``__transaction_state``,
``__cluster_metadata`` and ``__share_group_state`` with them (:mod:`.framing`: the frame of
the metadata topics' values); :mod:`.share_group_state`
turns the last into rows; :mod:`.remote_log` reads those of ``__remote_log_metadata`` (tiered
storage), with rows of its segments and their live set. The partition directory's state files are
:mod:`kafkalog.state_files`.
"""

from .schema import MessageError, MessageSpec, spec, spec_names, uuid_text
from .topics import (
    CLUSTER_METADATA,
    DECODERS,
    OFFSETS,
    REMOTE_LOG_METADATA,
    SHARE_GROUP_STATE,
    TOPIC_DECODERS,
    TRANSACTION_LOG,
    decode,
    decoder_for_path,
    decoder_for_topic,
    expand_consumer_protocol,
)

__all__ = [
    "CLUSTER_METADATA",
    "DECODERS",
    "MessageError",
    "MessageSpec",
    "OFFSETS",
    "REMOTE_LOG_METADATA",
    "SHARE_GROUP_STATE",
    "TOPIC_DECODERS",
    "TRANSACTION_LOG",
    "decode",
    "decoder_for_path",
    "decoder_for_topic",
    "expand_consumer_protocol",
    "spec",
    "spec_names",
    "uuid_text",
]
