"""What the warehouse raises: a catalog it cannot find or use, a publish another run
beat to the same offsets, a run with nothing to publish, a publish the audit did not
see. Each message says what to do about it."""

from __future__ import annotations


class CatalogError(RuntimeError):
    """No catalog could be found or used; the message says what to configure."""


class ConflictError(RuntimeError):
    """Another run committed overlapping offsets to ``main`` after this run read it.

    ``table``: the table where it was found; ``runs``: the run ids that published them
    (``?`` where a file's run is unknown); ``files``: how many of their files overlap."""

    def __init__(self, message: str, *, table: str = "", runs=(), files: int = 0):
        super().__init__(message)
        self.table, self.runs, self.files = table, tuple(runs), files


class NothingStaged(LookupError):
    """A run has no branch and nothing published: there is nothing to publish."""


class NotAudited(RuntimeError):
    """A publish that requires the audit found a branch head the audit did not read."""
