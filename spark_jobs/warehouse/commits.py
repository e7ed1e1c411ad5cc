"""One way to commit to a table, for every writer of the warehouse: what became of a
commit, and a commit that lost a race planned again at the new head.

A commit ends one of three ways (:func:`send`, the one place that decides):

* **committed**: the catalog took it;
* **refused** (known not committed): the catalog refused it before changing anything —
  pyiceberg's ``CommitFailedException`` (a requirement did not hold: the branch moved
  since it was read), the catalog's refusal of a snapshot beaten to its sequence number
  (:data:`._pyiceberg.STALE_SEQUENCE`), pyiceberg's ``ValidationException`` (a file it
  drops is not live). It comes out as :class:`.errors.CommitRefused`, the files written
  for it deleted; :func:`retry` reads the table again and plans again, up to
  :data:`COMMIT_ATTEMPTS` times;
* **outcome unknown**: any other error once the commit was under way (a lost connection,
  a timeout, the database's ``OperationalError``): the request may have landed and only
  its answer been lost (Java Iceberg's ``CommitStateUnknownException``). The table is read
  again and the commit looked for (its snapshot by id or by its commit token, its branch
  moves): not there, the files written for it are deleted; there, or the table not
  readable, they stay — a live snapshot may reference them (maintenance's orphan sweep
  takes them after its grace period where none does). Either way
  :class:`.errors.CommitFailed`, its ``outcome`` saying which: the run fails loudly, and
  its retry (every step of a run is idempotent) completes it.

A process killed at a commit (a ``BaseException`` that is not an ``Exception``) deletes
nothing either: it stops where it is.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass, field

from spark_jobs.warehouse.errors import CatalogError, CommitFailed, CommitRefused
from spark_jobs.warehouse.naming import COMMIT_TOKEN

log = logging.getLogger(__name__)

#: tries of a commit that lost a race (each planned again on the table loaded again)
COMMIT_ATTEMPTS = 8

#: a commit's outcome, as :class:`.errors.CommitFailed` names it
COMMITTED, NOT_COMMITTED, UNKNOWN = "committed", "not committed", "unknown"


@dataclass(frozen=True)
class Rewrite:
    """What a copy-on-write plan (:meth:`.runs.Warehouse.commit_rewrite`) would commit:
    the files it wrote (``add``, URIs) in place of the live files ``drop``, with
    ``summary`` on the snapshot; ``result``: what the rewrite returns once committed."""

    drop: list
    add: list
    summary: dict = field(default_factory=dict)
    result: object = None


def backoff(attempt: int) -> None:
    """Sleep before try ``attempt + 1`` of a commit: doubling from 50 ms up to 2 s, jittered."""
    time.sleep(min(0.05 * 2 ** attempt, 2.0) * (1 + random.random()))


def is_refusal(err: BaseException) -> bool:
    """Whether ``err`` is the catalog's (or pyiceberg's) refusal of a commit before it
    changed anything (the module's text)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    from spark_jobs.warehouse import _pyiceberg

    return isinstance(err, (CommitRefused, CommitFailedException, ValidationException)) or \
        (isinstance(err, ValueError) and _pyiceberg.is_stale_sequence(err))


def new_token() -> dict[str, str]:
    """A snapshot summary property unique to one commit: how :func:`token_landed` finds
    it where the snapshot id is pyiceberg's to choose."""
    return {COMMIT_TOKEN: uuid.uuid4().hex}


def send(table, commit, *, landed, discard=None):
    """Make one commit to ``table`` (a pyiceberg table): ``commit()``, returning what it
    returns. ``landed(table)``: whether the commit is in ``table`` as read again;
    ``discard()``: delete what was written for it, called only where it is known not
    committed. Raises :class:`.errors.CommitRefused` or :class:`.errors.CommitFailed`
    (the module's text)."""
    try:
        return commit()
    except (CommitRefused, CommitFailed):
        raise  # a commit inside this one decided already (and discarded its own files)
    except Exception as err:
        name = ".".join(table.name())
        if is_refusal(err):
            if discard is not None:
                discard()
            raise CommitRefused(f"{name}: {err}") from err
        outcome = outcome_of(table, landed)
        if outcome == NOT_COMMITTED and discard is not None:
            discard()
        log.error("%s: commit failed (%s: %s); read again, it is %s", name,
                  type(err).__name__, err, outcome)
        kept = "its files deleted" if outcome == NOT_COMMITTED else \
            "its files kept (maintenance's orphan sweep removes any no snapshot holds)"
        raise CommitFailed(
            f"{name}: a commit failed ({type(err).__name__}: {err}); the table read again "
            f"shows it {outcome}, {kept}: run the step again", outcome=outcome,
            table=name) from err


def outcome_of(table, landed) -> str:
    """:data:`COMMITTED` or :data:`NOT_COMMITTED` as ``landed`` finds ``table`` read again
    from its catalog, :data:`UNKNOWN` where it cannot be read."""
    try:
        return COMMITTED if landed(table.catalog.load_table(table.name())) else NOT_COMMITTED
    except Exception as err:  # noqa: BLE001 - any error reading it back: not known
        log.error("%s: could not read the table back after a failed commit: %s",
                  ".".join(table.name()), err)
        return UNKNOWN


def retry(what: str, step, *, attempts: int = COMMIT_ATTEMPTS, exhausted=None):
    """``step(attempt)`` until it returns, planned again (by ``step`` itself, on the table
    read again) after each :class:`.errors.CommitRefused`, with :func:`backoff` between
    tries (pyiceberg's own refusal too, where ``step`` commits through pyiceberg: see
    :func:`is_refusal`). Out of tries: ``exhausted()`` where given, else
    :class:`.errors.CatalogError` ("``what`` after n tries"). :class:`.errors.CommitFailed`
    and every other error go through: not retried."""
    for attempt in range(attempts):
        try:
            return step(attempt)
        except CommitFailed:
            raise
        except Exception as err:  # noqa: BLE001 - a refusal is tried again, nothing else
            if not is_refusal(err):
                raise
            log.info("%s: refused (%s); planning again", what, err)
            backoff(attempt)
    if exhausted is not None:
        return exhausted()
    raise CatalogError(f"{what} after {attempts} tries")


# ------------------------------------------------------------------ what landed means


def snapshot_landed(snapshot_id: int):
    """``landed`` of a commit that adds snapshot ``snapshot_id``."""
    return lambda table: table.metadata.snapshot_by_id(snapshot_id) is not None


def token_landed(summary: dict):
    """``landed`` of a commit whose new snapshot carries ``summary``'s commit token
    (:func:`new_token`)."""
    token = summary[COMMIT_TOKEN]
    return lambda table: any(s.summary is not None and s.summary.get(COMMIT_TOKEN) == token
                             for s in table.metadata.snapshots)


def refs_landed(moves: dict, *, properties: dict | None = None, removed=()):
    """``landed`` of a commit that moves each ref of ``moves`` (``ref: (now, then)``,
    ``then`` None: dropped), sets ``properties`` and removes ``removed``."""
    def landed(table) -> bool:
        refs = table.metadata.refs
        return all((refs[r].snapshot_id if r in refs else None) == then
                   for r, (_, then) in moves.items()) and \
            all(table.properties.get(k) == v for k, v in (properties or {}).items()) and \
            not any(k in table.properties for k in removed)
    return landed


__all__ = ["COMMITTED", "COMMIT_ATTEMPTS", "NOT_COMMITTED", "Rewrite", "UNKNOWN", "backoff",
           "is_refusal", "new_token", "outcome_of", "refs_landed", "retry", "send",
           "snapshot_landed", "token_landed"]
