"""Messages in the JSON form of Kafka's generated ``*JsonConverter`` (state files such as
``quorum-state`` store theirs so), checked against a spec of :mod:`.schema`."""

from __future__ import annotations

import base64

from .schema import PRIMITIVES, Field, MessageError, MessageSpec, Struct, uuid_bytes, versions_text


def read_json(spec: MessageSpec, doc, version: int) -> dict:
    """A message in the JSON form of Kafka's generated ``*JsonConverter`` (the form
    :meth:`.schema.MessageSpec.read` returns: JSON names, UUIDs and bytes as text), checked as
    the converter checks it: every non-tagged field of ``version`` present, each value of its
    type and range (a JSON number for numbers, null only where nullable); fields of other
    versions and unknown names are ignored. MessageError naming the field otherwise."""
    if version not in spec.valid:
        raise MessageError(f"{spec.name}: unknown version {version} (this reader knows "
                           f"{versions_text(spec.valid)})", 0)
    return _json_struct(spec.struct, doc, version, spec.name)



_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UNSIGNED = {"uint16": 16, "uint32": 32}


def _json_struct(s: Struct, node, version: int, path: str) -> dict:
    if not isinstance(node, dict):
        raise MessageError(f"{path}: expected a JSON object, got {_json_type(node)}", 0)
    out: dict = {}
    for f in s.fields:
        if version not in f.versions:
            continue
        if f.name not in node:
            if f.tagged_in(version):
                continue
            raise MessageError(f"{path}: no {f.name!r}, which is mandatory in version "
                               f"{version}", 0)
        out[f.name] = _json_value(f, node[f.name], version, f"{path}.{f.name}")
    return out


def _json_type(node) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(node), "a number")


def _json_value(f: Field, node, version: int, path: str):
    if node is None:
        if version in f.nullable:
            return None
        raise MessageError(f"{path}: null, but the field is not nullable in v{version}", 0)
    if f.is_array:
        if not isinstance(node, list):
            raise MessageError(f"{path}: expected an array, got {_json_type(node)}", 0)
        return [_json_element(f, x, version, f"{path}[{i}]") for i, x in enumerate(node)]
    return _json_element(f, node, version, path)


def _json_element(f: Field, node, version: int, path: str):
    t = f.type
    if t in _RANGES or t in _UNSIGNED:
        if type(node) is not int:
            raise MessageError(f"{path}: expected an integer, got {_json_type(node)}", 0)
        bits = _RANGES.get(t) or _UNSIGNED[t]
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t in _RANGES else \
            (0, (1 << bits) - 1)
        if not low <= node <= high:
            raise MessageError(f"{path}: {node} does not fit in {t}", 0)
        return node
    if t == "bool":
        if not isinstance(node, bool):
            raise MessageError(f"{path}: expected a boolean, got {_json_type(node)}", 0)
        return node
    if t == "float64":
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            raise MessageError(f"{path}: expected a number, got {_json_type(node)}", 0)
        return float(node)
    if t in PRIMITIVES:  # string, bytes, records, uuid: JSON strings
        if not isinstance(node, str):
            raise MessageError(f"{path}: expected a string, got {_json_type(node)}", 0)
        try:
            if t == "uuid":
                uuid_bytes(node)
            elif t != "string":
                base64.b64decode(node, validate=True)
        except ValueError as err:
            raise MessageError(f"{path}: {err}", 0) from err
        return node
    return _json_struct(f.struct, node, version, path)
