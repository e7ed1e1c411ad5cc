"""The audit's Data Docs: one run's validation results as static pages that work offline.

great-expectations' own site builder (``SiteBuilder`` + ``UpdateDataDocsAction``) is not
used, for three reasons:

* **offline**: its page templates load bootstrap, jQuery, bootstrap-table, font-awesome,
  vega and the GX logo from CDNs (about 20 URLs), and its index page is an empty table
  that jQuery fills in. Offline, and in the Airflow plugin's sandbox, it was blank.
* **statuses**: it shows a validation with any unsuccessful expectation as "Failed",
  whatever the expectation's ``severity``; our policy has warn-only checks.
* **cost**: the action rebuilds the whole site once per validation (11 suites: the
  index 11 times, every suite page, 4.5 MB of fonts and images), each time with a fresh
  Jinja environment that compiles every template again: ~16 s of a cold audit here, where
  :func:`build` takes under a second (expectations/README.md, "Build cost").

So the pages are still GX's: :class:`Page` is its ``ValidationResultsPageRenderer`` (the
overview, statistics and the table of expectations with their observed values), drawn
by its section and content-block templates, once per validation with one Jinja
environment. What is ours (``expectations/docs_templates/``): the page shell
(``page.html``: no CDN, no script, one inline stylesheet ``docs.css``), the index
(``index.html``: a plain table of the run's suites, no JavaScript), and the status.

**Status** (:func:`status`): ``fail`` when an unsuccessful expectation has severity
``critical``, ``warn`` when every unsuccessful one has severity ``warning``, else
``pass``. The suites set each expectation's severity from the policy's grade
(``expectations/suites.py``), so a check whose only problems are warn-graded reads
"Warning", as in dq_results and the report. GX's own ``success`` stays as GX computed it
(false); the status is derived from the expectations' GX 1.x ``severity`` field, so no
result is rewritten and no HTML is patched after rendering.

Layout of a built folder: ``index.html`` and ``validations/<suite>.html``; nothing else
(every page carries its stylesheet, there are no images, fonts or scripts to copy).

Imports great_expectations at module level: import this module inside tasks only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from great_expectations.expectations import UnexpectedRowsExpectation
from great_expectations.expectations.metadata_types import FailureSeverity
from great_expectations.render import LegacyDiagnosticRendererType, RenderedStringTemplateContent
from great_expectations.render.renderer import ValidationResultsPageRenderer
from great_expectations.render.renderer.renderer import renderer
from great_expectations.render.view import DefaultJinjaPageView
from jinja2 import ChoiceLoader, FileSystemLoader

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "docs_templates")

#: status -> (label shown, icon classes; docs.css draws the icons, no icon font)
STATUS_LABELS = {
    "fail": ("Failed", "fas fa-times text-danger"),
    "warn": ("Warning", "fas fa-exclamation-triangle text-warning"),
    "pass": ("Passed", "fas fa-check-circle text-success"),
}


def status(validation_result) -> str:
    """``fail``/``warn``/``pass`` of one suite's validation result, by the severities of
    its unsuccessful expectations (see the module docstring)."""
    worst = "pass"
    for r in validation_result.results:
        if r.success:
            continue
        if r.expectation_config.severity == FailureSeverity.WARNING:
            worst = "warn"
        else:
            return "fail"
    return worst


def _icon(cls: str) -> RenderedStringTemplateContent:
    return RenderedStringTemplateContent(
        content_block_type="string_template",
        string_template={"template": "$icon", "params": {"icon": ""},
                         "styling": {"params": {"icon": {"tag": "i", "classes": cls.split()}}}})


class PolicyRows(UnexpectedRowsExpectation):
    """``UnexpectedRowsExpectation`` whose status icon in Data Docs follows its severity:
    an unsuccessful one of severity ``warning`` is drawn as a warning, not as a failure."""

    @classmethod
    @renderer(renderer_type=LegacyDiagnosticRendererType.STATUS_ICON)
    def _diagnostic_status_icon_renderer(cls, configuration=None, result=None,
                                         runtime_configuration=None):
        if (result is not None and result.success is False
                and result.expectation_config.severity == FailureSeverity.WARNING
                and not (result.exception_info or {}).get("raised_exception")):
            return _icon(STATUS_LABELS["warn"][1])
        return super()._diagnostic_status_icon_renderer(
            configuration=configuration, result=result, runtime_configuration=runtime_configuration)


class Page(ValidationResultsPageRenderer):
    """GX's validation page, with the policy's status in its overview and no link to an
    expectation-suite page (none is built: the validation page lists the same
    expectations with their results)."""

    @classmethod
    def _render_validation_header(cls, validation_results):
        header = super()._render_validation_header(validation_results)
        template = header.subheader.string_template
        label, icon = STATUS_LABELS[status(validation_results)]
        template["params"]["success"] = label
        template["params"]["html_success_icon"] = f'<i class="{icon}" aria-hidden="true"></i>'
        template["styling"]["params"].pop("expectation_suite_name", None)
        return header


class View(DefaultJinjaPageView):
    """GX's page view drawing our ``page.html`` (autoescaped, by its name) around GX's
    section templates; ``docs_templates/`` is searched first."""

    _template = "page.html"

    def __init__(self) -> None:
        super().__init__()
        self.env.loader = ChoiceLoader([FileSystemLoader(TEMPLATES), self.env.loader])


@dataclass(frozen=True, slots=True)
class Entry:
    """One validation of the run as the index lists it."""
    suite: str
    status: str
    path: str           # relative to the docs folder
    description: str
    failed_rows: int    # unexpected rows of its severity-critical expectations
    warned_rows: int    # ... and of its severity-warning ones


def _unexpected(vr, severity) -> int:
    return sum(int((r.result or {}).get("observed_value") or 0) for r in vr.results
               if r.expectation_config.severity == severity)


def build(results, docs_dir: str, run_name: str, descriptions=None) -> list[Entry]:
    """Write one page per validation result and ``index.html`` (worst status first, then
    by suite name) into ``docs_dir``; return the index entries. ``descriptions``:
    suite name -> what it checks (shown on the index)."""
    page, view = Page(), View()
    os.makedirs(os.path.join(docs_dir, "validations"), exist_ok=True)
    entries = []
    for vr in results:
        path = f"validations/{vr.suite_name}.html"
        html = view.render(page.render(vr), home="../index.html", run_name=run_name)
        with open(os.path.join(docs_dir, path), "w", encoding="utf-8") as f:
            f.write(html)
        entries.append(Entry(vr.suite_name, status(vr), path, (descriptions or {}).get(vr.suite_name, ""),
                             _unexpected(vr, FailureSeverity.CRITICAL),
                             _unexpected(vr, FailureSeverity.WARNING)))
    order = list(STATUS_LABELS)
    entries.sort(key=lambda e: (order.index(e.status), e.suite))
    index = view.env.get_template("index.html").render(
        run_name=run_name, entries=entries, labels=STATUS_LABELS)
    with open(os.path.join(docs_dir, "index.html"), "w", encoding="utf-8") as f:
        f.write(index)
    return entries
