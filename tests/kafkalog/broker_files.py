"""A broker's log-directory files as Kafka writes them (meta.properties, offset checkpoints),
from Kafka's writers (PropertiesUtils, CheckpointFile), not from kafkalog."""

from __future__ import annotations


def properties_as_kafka_writes(props: dict[str, str], date: str) -> bytes:
    """PropertiesUtils.writePropertiesFile: Properties.store(writer, "") - a "#" comment line
    for the empty comment, one with the date, then key=value with store's escapes (a
    backslash before \\, =, :, # and !, \\t \\n \\r \\f spelled out, a leading space
    escaped), UTF-8."""
    def escape(text: str, is_key: bool) -> str:
        out = []
        for i, c in enumerate(text):
            if c in "\\=:#!":
                out.append("\\" + c)
            elif c in "\t\n\r\f":
                out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
            elif c == " " and (i == 0 or is_key):
                out.append("\\ ")
            else:
                out.append(c)
        return "".join(out)
    lines = ["#", f"#{date}"] + [f"{escape(k, True)}={escape(v, False)}" for k, v in props.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def checkpoint_as_kafka_writes(entries) -> bytes:
    """CheckpointFile.CheckpointWriteBuffer with OffsetCheckpointFile's formatter."""
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for t, p, o in entries]
    return ("\n".join(lines) + "\n").encode()
