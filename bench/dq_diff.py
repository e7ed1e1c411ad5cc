"""dq_results of two versions of the audit, compared field by field (issue 43: the audit made
faster gives the same rows).

* ``run``: the audit of the bench's run (``bench_audit.py``'s warehouse, prepared there once)
  by spark-submit with each code (``--base`` and ``--code``: checkouts, put first on
  ``PYTHONPATH``), alternately ``--rounds`` times, each time the run's ``dq_results`` rows read
  back from the warehouse; every reading must equal the first.
* ``compare A B``: two files of ``bench/dq_capture.py`` (the rows every audit of a test run
  returned), test by test and call by call.

Rows are compared canonically: ``checked_at`` (the audit's clock) and ``run_id`` left out,
``details`` parsed (its JSON keys sorted), pytest's temporary folders
(``/tmp/pytest-of-<user>/pytest-<n>/``) written ``<tmp>/``; nothing else is ignored, and the
order of the rows counts. Exit 0 when all agree, 1 (and the differences printed) otherwise.

    .venv/bin/python bench/dq_diff.py run --base ../base --code . [--rounds 1]
    .venv/bin/python bench/dq_diff.py compare rows-base.jsonl rows-new.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: what is not compared: the audit's clock and the run id
IGNORED = ("checked_at", "run_id")
_TMP = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/")


def canonical(rows, roots=()) -> list[dict]:
    """``rows`` (dq_results rows: dicts) as compared: see the module docstring; each of
    ``roots`` (a checkout whose test data the tests read) written ``<checkout>``."""
    out = []
    for r in rows:
        r = {k: v for k, v in dict(r).items() if k not in IGNORED}
        if isinstance(r.get("details"), str):
            r["details"] = json.loads(r["details"])
        text = _TMP.sub("<tmp>/", json.dumps(r, sort_keys=True, default=str))
        for root in roots:
            text = text.replace(str(root).rstrip("/") + "/", "<checkout>/")
        out.append(json.loads(text))
    return out


def differences(a: list[dict], b: list[dict], label: str) -> list[str]:
    """Lines naming where the canonical rows ``a`` and ``b`` differ (empty: identical)."""
    if a == b:
        return []
    out = [f"{label}: {len(a)} rows against {len(b)}"]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            out.append(f"  row {i} ({x.get('check')} {x.get('topic')}-{x.get('partition')}): "
                       + "; ".join(f"{k}: {x.get(k)!r} != {y.get(k)!r}" for k in keys)[:2000])
    return out


def read_rows(warehouse: Path, run_id: str) -> list[dict]:
    """The run's dq_results rows on ``main``, in the order the audit wrote them."""
    from spark_jobs.tables import read_arrow

    table = read_arrow(str(warehouse), "dq_results")
    return [r for r in table.to_pylist() if r["run_id"] == run_id]


def run(args) -> int:
    import subprocess

    sys.path.insert(0, str(HERE))
    import bench_audit

    wh = bench_audit.prepare(args.out, args.cores, {**os.environ})
    first, problems = None, []
    for i in range(args.rounds):
        for label, code in (("base", args.base), ("code", args.code)):
            env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
            env.setdefault("PYSPARK_PYTHON", sys.executable)
            events = args.out / f"events-diff-{label}-{i}"
            events.mkdir(parents=True, exist_ok=True)
            entry = str(Path(code).resolve() / "kafkalog_pipeline" / "spark_entry.py")
            cmd = bench_audit.submit_command(args.cores, events, [
                entry, "spark_jobs.check_quality", "--warehouse", str(wh), "--run-id",
                bench_audit.RUN])
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            if done.returncode not in (0, 65):
                sys.stderr.write(done.stdout[-4000:])
                raise SystemExit(f"the audit with {code} exited {done.returncode}")
            rows = canonical(read_rows(wh, bench_audit.RUN))
            print(f"{label} ({code}), round {i}: {len(rows)} rows, exit {done.returncode}")
            if first is None:
                first = rows
            problems += differences(first, rows, f"{label} round {i}")
    print("\n".join(problems) or f"identical: {len(first)} rows every time")
    return 1 if problems else 0


def compare(args) -> int:
    def load(path):
        out = {}
        for line in Path(path).read_text().splitlines():
            x = json.loads(line)
            out[(x["test"], x["call"], len(out))  # every line, in order
                if x["test"] == "bench_audit" else (x["test"], x["call"])] = \
                canonical(x["rows"], args.mask)
        return out

    a, b = load(args.a), load(args.b)
    problems = [f"only in {args.a}: {k}" for k in sorted(set(a) - set(b))]
    problems += [f"only in {args.b}: {k}" for k in sorted(set(b) - set(a))]
    for key in sorted(set(a) & set(b)):
        problems += differences(a[key], b[key], f"{key[0]} call {key[1]}")
    print("\n".join(problems) or f"identical: {len(a)} audits, "
          f"{sum(len(v) for v in a.values())} rows")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--base", required=True)
    r.add_argument("--code", default=str(HERE.parent))
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--cores", type=int, default=2)
    r.add_argument("--out", type=Path, default=HERE / "out" / "audit")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--mask", action="append", default=[], metavar="PATH",
                   help="a checkout's path, written <checkout> (the tests' data are read "
                        "from the checkout that runs them)")
    args = ap.parse_args(argv)
    return run(args) if args.what == "run" else compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
