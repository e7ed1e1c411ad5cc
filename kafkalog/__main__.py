"""``python -m kafkalog`` is the ``kafkalog`` command."""

import sys

from .cli import main

sys.exit(main())
