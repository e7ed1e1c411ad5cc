"""The ``kafkalog`` command line: ``dump`` segments and index files, read ``index`` files.

``dump`` chooses what a file is by its name, as Kafka's ``kafka-dump-log.sh``
does: ``.log`` is a segment, ``.index``/``.timeindex``/``.txnindex`` an index
(printed as ``index`` prints it). Kafka renames a segment's files by appending
``.deleted``, ``.cleaned`` or ``.swap``; the suffix before that still decides
(``…0.log.deleted`` is a log). Every state file a broker writes in a log directory
is read too (:mod:`kafkalog.log_dir` says which is which): a partition folder's
producer-state ``.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``;
the directory's ``meta.properties``, ``.kafka_cleanshutdown`` and four offset
checkpoints; KRaft's ``quorum-state``, snapshots (``<offset>-<epoch>.checkpoint``, also
renamed ``.deleted``) and ``bootstrap.checkpoint``. Anything else (a file without a
suffix, say) is refused, unless ``--force-log`` decodes it as a log; a directory is refused
with the glob of its segments (a partition folder's ``DIR/*.log``, a log directory's
``DIR/*/*.log``).

The records of Kafka's internal topics are decoded (``--records``: a ``decoded``
object in JSON, ``key: … payload: …`` in text) when the partition folder names the
topic (``__consumer_offsets-N``, ``__transaction_state-N``, ``__cluster_metadata-0``,
``__share_group_state-N``, ``__remote_log_metadata-N``) or ``--decoder`` says which
(:mod:`kafkalog.internal`).

``--schemas SOURCE`` decodes keys and values written in Schema Registry's wire format
with a registry rebuilt from SOURCE (the snapshot's ``_schemas`` topic, a schema folder
or a registry URL: :mod:`kafkalog.schemas`); a key or value that does not decode is a
``key_decode_error``/``value_decode_error`` finding, a JSON document that breaks its
schema a ``key_schema_violation``/``value_schema_violation``.

A tiered-storage segment's ``.rsm-manifest`` (a path or ``s3://`` URI) is read as its segment
(``dump``) or its indexes (``index``), given ``--private-key`` where it is encrypted; ``kafkalog
tiered`` cats and lists such segments (:mod:`.tiered`).

Exit status, the same for both commands (with several files the highest wins):
see :data:`EXIT_STATUS`. Errors and refusals are one line on stderr, with no
traceback and nothing printed for that file before them.

Text output ends each file with a summary line (a segment's records count its control
records apart, ``36 records (34 data, 2 control)``: the warehouse's ``records`` table holds
the data records, ``markers`` the control ones); with ``--json`` stdout holds
only the JSON objects (one per line) and the summary line goes to stderr.

One module per command: :mod:`.dump`, :mod:`.index`, :mod:`.tiered`; what a file is by
its name in :mod:`.files`, batches and records as printed in :mod:`.render`, exit statuses,
output lines and the summary in :mod:`.output`.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__, _accel
from ..errors import KafkaLogError
from . import dump, index, tiered
from .output import EXIT_ERROR, EXIT_OK, EXIT_STATUS

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kafkalog",
        description="Decode Kafka log segments (v0/v1/v2, every codec) and their index files.",
        epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kafkalog {__version__} ("
                        + ("compiled fast path" if _accel.active() else "pure Python") + ")")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    dump.add_parser(sub)
    index.add_parser(sub)
    tiered.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, sys.stdout)
    except BrokenPipeError:  # `kafkalog dump ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KafkaLogError as err:
        print(f"kafkalog: {err}", file=sys.stderr)
        return EXIT_ERROR
