"""What the warehouse raises: a catalog it cannot find or use, a publish another run
beat to the same offsets, a run with nothing to publish, a publish the audit did not
see. Each message says what to do about it."""

from __future__ import annotations


class CatalogError(RuntimeError):
    """No catalog could be found or used; the message says what to configure."""


class ConflictError(RuntimeError):
    """Another run committed overlapping offsets to ``main`` after this run read it."""


class NothingStaged(LookupError):
    """A run has no branch and nothing published: there is nothing to publish."""


class NotAudited(RuntimeError):
    """A publish that requires the audit found a branch head the audit did not read."""
