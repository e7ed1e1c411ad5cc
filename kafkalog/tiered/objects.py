"""Where a tier's objects are read from: a local folder (a copy of the bucket) or S3.

The reader needs three things of a store, and anything that has them will do (the Spark job
can pass its own, with its pinned reads and retries)::

    read(key, start, end) -> bytes    bytes [start, end) of an object; fewer at its end
                                      (never more); RemoteObjectError if it is not there
    list(prefix) -> iterable of (key, size), every object whose key starts with prefix
    uri(key) -> str                   what messages call the object

:class:`LocalObjects` reads files under a root folder (keys are ``/``-separated paths under
it); :class:`S3Objects` makes ranged GETs with boto3, which is imported only then (the
endpoint and credentials are boto3's: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
:func:`open_uri` splits a path or ``s3://bucket/key`` into a store and a key.
"""

from __future__ import annotations

import os
from typing import Iterator, Protocol

from ..errors import RemoteObjectError

S3_SCHEME = "s3://"


class ObjectStore(Protocol):
    def read(self, key: str, start: int, end: int) -> bytes: ...

    def list(self, prefix: str) -> Iterator[tuple[str, int]]: ...

    def uri(self, key: str) -> str: ...


class LocalObjects:
    """Files under ``root``; the key ``a/b.log`` is ``root/a/b.log``."""

    def __init__(self, root: str) -> None:
        self.root = os.fspath(root)

    def uri(self, key: str) -> str:
        return os.path.join(self.root, key) if key else self.root

    def read(self, key: str, start: int, end: int) -> bytes:
        path = self.uri(key)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except FileNotFoundError as err:
            raise RemoteObjectError(f"{path}: no such object") from err
        except OSError as err:
            raise RemoteObjectError(f"cannot read {path}: {err.strerror or err}") from err

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """Files under the root whose key starts with ``prefix``, sorted by key."""
        if not os.path.isdir(self.root):
            raise RemoteObjectError(f"{self.root}: no such folder")
        found = []
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                full = os.path.join(dirpath, name)
                key = os.path.relpath(full, self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    found.append((key, os.path.getsize(full)))
        yield from sorted(found)


class S3Objects:
    """Objects of one S3 bucket, read with ranged GETs. ``client``: a boto3 S3 client, by
    default one made from the environment when first needed."""

    def __init__(self, bucket: str, client=None) -> None:
        self.bucket = bucket
        self._client = client

    @property
    def client(self):
        if self._client is None:
            try:
                import boto3
            except ImportError as err:  # pragma: no cover - depends on the environment
                raise RemoteObjectError(f"reading s3://{self.bucket} needs boto3: "
                                        "pip install boto3") from err
            self._client = boto3.client("s3")
        return self._client

    def uri(self, key: str) -> str:
        return f"{S3_SCHEME}{self.bucket}/{key}"

    def read(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key,
                                          Range=f"bytes={start}-{end - 1}")
            return resp["Body"].read()
        except Exception as err:
            code = _error_code(err)
            if code in ("InvalidRange", "416"):  # the range starts past the object's end
                return b""
            if code in ("NoSuchKey", "404", "NotFound"):
                raise RemoteObjectError(f"{self.uri(key)}: no such object") from err
            raise RemoteObjectError(f"cannot read {self.uri(key)} [{start}, {end}): "
                                    f"{err}") from err

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    yield obj["Key"], int(obj["Size"])
        except RemoteObjectError:
            raise
        except Exception as err:
            raise RemoteObjectError(f"cannot list {self.uri(prefix)}: {err}") from err


def _error_code(err: Exception) -> str:
    """botocore's error code (``NoSuchKey``) or HTTP status, "" for other exceptions."""
    meta = getattr(err, "response", None) or {}
    return str(meta.get("Error", {}).get("Code")
               or meta.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")


def open_uri(uri: str, client=None) -> tuple[ObjectStore, str]:
    """``(store, key)`` for ``s3://bucket/key`` or a local path (the store is the path's
    folder, the key its name: the objects beside it have keys of their own names)."""
    if uri.startswith(S3_SCHEME):
        bucket, _, key = uri[len(S3_SCHEME):].partition("/")
        if not bucket:
            raise RemoteObjectError(f"{uri!r} names no bucket")
        return S3Objects(bucket, client), key
    path = os.path.abspath(uri)
    return LocalObjects(os.path.dirname(path)), os.path.basename(path)


def open_prefix(prefix: str, client=None) -> tuple[ObjectStore, str]:
    """``(store, key prefix)`` for listing: ``s3://bucket/some/prefix`` or a local folder
    (then every file under it)."""
    if prefix.startswith(S3_SCHEME):
        return open_uri(prefix, client)
    return LocalObjects(os.path.abspath(prefix)), ""
