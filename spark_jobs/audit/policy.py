"""The severity policy: what each kind of observation does to a check, per topic.

A policy is ``{"checks": {...}, "topics": {pattern: {"compacted": bool, "checks": {...}}}}``
(see ``expectations/policy.yaml``). :meth:`Policy.for_topic` deep-merges the
overrides of every matching pattern (globs first, then the exact name) into
the defaults. Severities are ``fail``, ``warn`` or ``pass``.
"""

from __future__ import annotations

import copy
import fnmatch
import os

SEVERITIES = ("pass", "warn", "fail")
RANK = {s: i for i, s in enumerate(SEVERITIES)}
#: ``truncated_tail``'s classes graded by a key of their own beside its ``severity``: the
#: partition's newest segment (a live broker's), a tail Kafka's recovery cuts off after an
#: unclean shutdown (:mod:`.log_dir_checks`)
ACTIVE_SEGMENT, UNCLEAN_SHUTDOWN = "active_segment", "unclean_shutdown"
TAIL_CLASSES = (ACTIVE_SEGMENT, UNCLEAN_SHUTDOWN)

#: what becomes of a night the audit graded ``warn`` (``publish_warned``): published at once
#: (``auto``, the default), once a person approved it in Airflow's Required actions
#: (``approve``), or not at all (``never``); of a publish refused because another run published
#: the same offsets first (``publish_conflict``): rerun at once (``rerun``, the default) or once a
#: person approved the rerun (``approve``). Read by ``kafkalog_pipeline.gate``.
PUBLISH_WARNED = ("auto", "approve", "never")
PUBLISH_CONFLICT = ("rerun", "approve")
#: the environment variable naming another policy file than expectations/policy.yaml (read by
#: :meth:`Policy.load` without a path: the DAG's tasks and the audit they submit alike)
POLICY_ENV = "KAFKALOG_POLICY"

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "expectations", "policy.yaml")


class PolicyError(ValueError):
    """The policy file is malformed; the message names the key."""


def worst(statuses) -> str:
    out = "pass"
    for s in statuses:
        if s is not None and RANK[s] > RANK[out]:
            out = s
    return out


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _validate(node, where: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{where}.{k}" if where else str(k)
            if k in ("severity", "beyond_tolerance", *TAIL_CLASSES) or where.endswith(
                    (".classes", ".kinds")):
                if v not in SEVERITIES:
                    raise PolicyError(f"{key}: {v!r} is not one of {', '.join(SEVERITIES)}")
            else:
                _validate(v, key)


class Policy:
    def __init__(self, doc: dict):
        if not isinstance(doc, dict) or not isinstance(doc.get("checks"), dict):
            raise PolicyError("a policy needs a `checks` mapping")
        self.checks = doc["checks"]
        self.topics = doc.get("topics") or {}
        _validate(self.checks, "checks")
        for pattern, over in self.topics.items():
            if not isinstance(over, dict):
                raise PolicyError(f"topics.{pattern}: expected a mapping")
            _validate(over.get("checks") or {}, f"topics.{pattern}.checks")
        self.lookback_nights()  # checked now, not when an audit first needs it
        self.missing_share()
        self.publish_warned = self._choice(doc, "publish_warned", PUBLISH_WARNED)
        self.publish_conflict = self._choice(doc, "publish_conflict", PUBLISH_CONFLICT)
        self._cache: dict[str, dict] = {}

    @staticmethod
    def _choice(doc: dict, key: str, allowed: tuple[str, ...]) -> str:
        """Top-level setting ``key`` of the policy, one of ``allowed`` (absent: the first)."""
        value = doc.get(key, allowed[0])
        if value not in allowed:
            raise PolicyError(f"{key}: {value!r} is not one of {' | '.join(allowed)}")
        return value

    @classmethod
    def load(cls, path: str | None = None) -> "Policy":
        """The policy at ``path``; by default the file ``$KAFKALOG_POLICY`` names, else
        ``expectations/policy.yaml`` (read as package data, so that it is found in a
        ``--py-files`` zip too)."""
        import yaml

        path = path or os.environ.get(POLICY_ENV) or None
        if path is None:
            from importlib import resources

            text = resources.files("expectations").joinpath("policy.yaml").read_text("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        try:
            return cls(yaml.safe_load(text))
        except yaml.YAMLError as err:
            raise PolicyError(f"{path or DEFAULT_PATH}: {err}") from err

    def for_topic(self, topic: str | None) -> dict:
        """``{"compacted": bool, "checks": {...}}`` in effect for ``topic`` (None: a result
        about no topic, such as a night without a snapshot: the defaults)."""
        got = self._cache.get(topic)
        if got is None:
            merged = {"compacted": False, "checks": copy.deepcopy(self.checks)}
            if topic is None:
                got = self._cache[topic] = merged
                return got
            globs = [p for p in self.topics if p != topic and fnmatch.fnmatchcase(topic, p)]
            exact = [topic] if topic in self.topics else []
            for pattern in globs + exact:
                merged = _merge(merged, self.topics[pattern])
            got = self._cache[topic] = merged
        return got

    def check(self, topic: str, check: str) -> dict:
        return self.for_topic(topic)["checks"].get(check) or {}

    def severity(self, topic: str, check: str, kind: str | None = None) -> str:
        """Severity of an observation of ``kind`` (a gap class, a finding kind) in ``check``."""
        conf = self.check(topic, check)
        if kind is not None:
            table = conf.get("classes") or conf.get("kinds")
            if table is not None:
                return table.get(kind, table.get("other", table.get("unexplained", "fail")))
            if kind == "beyond_tolerance":
                return conf.get("beyond_tolerance", "fail")
            if kind in TAIL_CLASSES:
                return conf.get(kind, conf.get("severity", "fail"))
        return conf.get("severity", "fail")

    def headline(self, topic: str, check: str) -> str:
        """The severity a check reports when nothing was observed: its strictest setting."""
        conf = self.check(topic, check)
        table = conf.get("classes") or conf.get("kinds")
        if table is not None:
            return worst(table.values())
        if check == "create_time" and conf.get("tolerance_ms") is not None:
            return worst([conf.get("severity", "warn"), conf.get("beyond_tolerance", "fail")])
        return conf.get("severity", "fail")

    def lookback_nights(self) -> int:
        """How many snapshot nights before a run's ``missing_partition`` compares it with
        (the defaults' setting: which partitions a snapshot should hold is not per topic)."""
        value = (self.checks.get("missing_partition") or {}).get("lookback_nights", 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PolicyError(f"checks.missing_partition.lookback_nights: {value!r} is not a "
                              "positive whole number")
        return value

    def missing_share(self) -> float | None:
        """The share of the partitions the earlier nights held beyond which the partitions a
        snapshot lacks are ``beyond_max_share`` (``missing_partition.max_share``, 0.5 by
        default: a night that lost most of them; null: never). Like ``lookback_nights``, the
        defaults' setting."""
        value = (self.checks.get("missing_partition") or {}).get("max_share", 0.5)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= 1):
            raise PolicyError(f"checks.missing_partition.max_share: {value!r} is not a share "
                              "between 0 and 1 (or null)")
        return None if value is None else float(value)

    def compacted(self, topic: str) -> bool:
        return bool(self.for_topic(topic).get("compacted"))

    def tolerance_ms(self, topic: str):
        return self.check(topic, "create_time").get("tolerance_ms")
