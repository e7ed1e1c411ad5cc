"""``python -m kafkalog.cli``, as ``python -m kafkalog`` and the ``kafkalog`` command."""

import sys

from . import main

sys.exit(main())
