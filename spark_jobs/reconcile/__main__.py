"""``python -m spark_jobs.reconcile``: :func:`spark_jobs.reconcile.job.main`."""

import sys

from spark_jobs.reconcile.job import main

sys.exit(main())
