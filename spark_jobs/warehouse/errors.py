"""What the warehouse raises: a catalog it cannot find or use, a commit it refused or
whose outcome was lost, a publish another run beat to the same offsets, a run with
nothing to publish, a publish the audit did not see. Each message says what to do about
it; no pyiceberg exception is part of the warehouse's contract."""

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


class CommitError(CatalogError):
    """A commit to a table did not go through as asked (:mod:`.commits`)."""


class CommitRefused(CommitError):
    """The catalog refused a commit before changing anything: the branch moved since it
    was read (a lost compare-and-swap), another snapshot took its sequence number, or a
    file it drops is no longer live. Known not committed: read the table again and plan
    again (:func:`.commits.retry` does)."""


class CommitFailed(CommitError):
    """A commit failed otherwise (a lost connection, a timeout, a database error once the
    request was sent). ``outcome``, decided by reading the table again: ``committed`` (it
    landed), ``not committed``, or ``unknown`` (the table could not be read). The files
    written for it were deleted only where ``not committed``; otherwise they stay (a
    live snapshot may hold them; maintenance's orphan sweep takes them after its grace
    period where none does). Run again: every step of a run is idempotent."""

    def __init__(self, message: str, *, outcome: str, table: str = ""):
        super().__init__(message)
        self.outcome, self.table = outcome, table
