"""What maintenance raises itself (the warehouse's errors, such as
:class:`spark_jobs.warehouse.CatalogError`, come through as they are)."""

from __future__ import annotations


class MaintenanceError(RuntimeError):
    """Maintenance refused to go on (the message says why); nothing unsafe was done."""
