"""A failed run's first section: it was not published, where its rows are, the ways forward.

The DAG publishes a run only after its audit passed (write -> audit -> publish, docs/tables.md):
a run with a failed check left ``main`` of every table unchanged and its rows on its Iceberg
branch ``run_<run_token>`` (``spark_jobs.warehouse.branch_name``) until a later plan of the same
run makes the branch again. The ways forward are those of dags/README.md, "After a failed audit":
fix the cause and clear the run, run again without the failing topics (the DAG's ``topics``
param), or accept the finding for that topic in the policy (expectations/policy.yaml).
"""

from __future__ import annotations

import json
import logging
import re
from html import escape

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID
from spark_jobs.warehouse import branch_name

from .model import Coverage, Run

log = logging.getLogger(__name__)

#: a topic name YAML reads as is (Kafka's legal characters, not starting with a YAML indicator)
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

#: where the ways forward are written down
GUIDE = "dags/README.md#after-a-failed-audit"
#: how to read a branch
READING = "docs/tables.md#reading-the-tables"
#: the policy file a per-topic override goes into
POLICY_FILE = "expectations/policy.yaml"


def failing(run: Run) -> dict:
    """``{topic or None: {check: [failed classes]}}`` of the run's failed results."""
    out: dict = {}
    for r in run.results:
        if r.status != "fail":
            continue
        classes = {} if r.details is None else r.details.classes
        bad = sorted(name for name, c in classes.items() if str(c.status).lower() == "fail")
        found = out.setdefault(r.topic, {}).setdefault(r.check, [])
        found += [c for c in bad if c not in found]
    return out


def _policy():
    try:
        from spark_jobs.audit.policy import Policy

        return Policy.load()
    except Exception as err:  # noqa: BLE001 - a suggestion only: the generic form then
        log.warning("cannot read the default policy: %s", err)
        return None


def override(bad: dict) -> str:
    """The YAML of a per-topic override in the policy that makes the failed classes warn:
    ``classes:`` / ``kinds:`` for a check graded by class or finding kind (as the default
    policy grades it), else the check's ``severity`` (or ``beyond_tolerance``)."""
    policy = _policy()
    lines = []
    topics = [(t, checks) for t, checks in bad.items() if t is not None]
    for topic, checks in sorted(topics):
        lines.append(f"  {topic if _PLAIN.fullmatch(topic) else json.dumps(topic)}:")
        lines.append("    checks:")
        for check, classes in sorted(checks.items()):
            conf = policy.check(topic, check) if policy is not None else {}
            table = "classes" if "classes" in conf else "kinds" if "kinds" in conf else None
            if table and classes:
                lines.append(f"      {check}: {{{table}: {{{', '.join(f'{c}: warn' for c in classes)}}}}}")
            elif "beyond_tolerance" in classes:
                lines.append(f"      {check}: {{beyond_tolerance: warn}}")
            else:
                lines.append(f"      {check}: {{severity: warn}}")
    return "topics:\n" + "\n".join(lines) if lines else ""


def unpublished(run: Run, cov: Coverage | None) -> bool:
    """A run whose audit failed and whose rows are not on ``main`` (the DAG did not publish it)."""
    return run.verdict == "fail" and not (cov is not None and cov.published)


def section(run: Run, cov: Coverage | None, *, root: str, catalog: str, namespace: str) -> str:
    """The section a failed, unpublished run's page opens with ("" for any other run)."""
    if not unpublished(run, cov):
        return ""
    cov = cov or Coverage()
    branch = branch_name(run.run_id)
    bad = failing(run)
    if cov.branch:
        where = (f"Its rows are on its Iceberg branch <code>{escape(branch)}</code> of the tables "
                 "(records, batches, markers, findings, ledger) until this run is planned again."
                 '</p><details class="read-branch"><summary>How to read that branch</summary>'
                 f"<code>spark_jobs.tables.read_arrow({escape(json.dumps(root))}, \"records\", "
                 f"ref=\"{escape(branch)}\")</code>, or in Spark with the Iceberg runtime "
                 f"<code>SELECT * FROM {escape(catalog)}.{escape(namespace)}.records.branch_"
                 f"{escape(branch)}</code> (<code>{READING}</code>)</details>")
    else:
        where = (f"Its rows were on its Iceberg branch <code>{escape(branch)}</code>, which the "
                 "ledger no longer has (the run was planned again, or the branch dropped: "
                 f"<code>{READING}</code>).</p>")
    topics = sorted(t for t in bad if t is not None)
    keep = [t for t in cov.topics if t not in bad]
    dates = {"date_from": cov.read[0], **({"date_to": cov.read[-1]} if len(cov.read) > 1 else {})} \
        if cov.read else {}
    if None in bad:
        rerun = ("<b>Run again without the failing topic</b>: not open here, a failure of the "
                 "snapshot itself (no topic) is in every run of these nights.")
    elif not keep:
        rerun = ("<b>Run again without the failing topic</b>: not open here, every topic the run "
                 "read has a failed check.")
    else:
        conf = {**dates, "topics": ", ".join(keep)}
        rerun = (f"<b>Run again without {escape(', '.join(topics))}</b>: trigger "
                 f"<code>{NIGHTLY_DAG_ID}</code> with the param <code>topics</code> = every topic "
                 f"it read but {escape(', '.join(topics))}: <code>airflow dags trigger "
                 f"{NIGHTLY_DAG_ID} --conf '{escape(json.dumps(conf))}'</code>. That run "
                 "publishes their partitions; this one stays unpublished.")
    snippet = override(bad)
    policy = (f"<b>Accept it by policy</b>: a per-topic override in <code>{POLICY_FILE}</code> "
              "(deployed with the pipeline) makes the finding a warning for that topic; then "
              "clear this run"
              + (f":<pre class=\"policy\">{escape(snippet)}</pre>" if snippet else
                 " (a failure of no topic is graded by the check's defaults, <code>checks:</code>)."))
    return (
        '<section id="not-published" class="not-published">'
        "<h2>Not published: main unchanged</h2>"
        "<p>A check failed, so the DAG did not publish this run: <code>main</code> of every "
        f"table is as it was. {where}"
        f'<p>Ways forward (<code id="guide">{GUIDE}</code>):</p><ol class="ways">'
        "<li><b>Fix the cause and clear the run</b> (in Airflow, from <code>plan</code>): it is "
        "decoded, audited and, if it passes, published under the same run id.</li>"
        f"<li>{rerun}</li><li>{policy}</li></ol></section>")
