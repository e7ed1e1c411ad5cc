"""``python -m spark_jobs.maintenance ...``: the command line of
:mod:`spark_jobs.maintenance.job`."""

from spark_jobs.maintenance.job import main

if __name__ == "__main__":
    main()
