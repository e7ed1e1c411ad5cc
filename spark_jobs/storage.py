"""One interface over the two kinds of root the pipeline reads and writes.

A root is a local directory or ``s3://bucket/prefix``. S3 goes through boto3
(there are no ``s3a://`` jars here): the endpoint and credentials come from the
standard AWS environment variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``) or from an explicit
:class:`S3Config`, which is small and picklable so that executors can rebuild
the client themselves: segment bytes never pass through the driver.

Keys are always ``/``-separated and relative to the root.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

_TOKEN_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def run_token(run_id: str) -> str:
    """A file-name-safe, unique form of ``run_id`` (see docs/tables.md)."""
    if not run_id:
        raise ValueError("a run id must not be empty")
    safe = _TOKEN_SAFE.sub("_", run_id)
    if safe == run_id:
        return safe
    return f"{safe}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


class ObjectInfo(NamedTuple):
    key: str  # relative to the root
    size: int
    etag: str | None  # S3 ETag (quotes stripped); None for local files
    mtime: dt.datetime  # UTC


@dataclass(frozen=True)
class S3Config:
    """How to reach S3: endpoint, region and credentials -- the one S3 configuration type.

    Keys are either *explicit* (given by an Airflow connection, see
    ``kafkalog_pipeline.settings.s3_access``) or the environment's, resolved through boto's
    credential chain (:meth:`from_env`, :meth:`resolved`). Only explicit keys are handed to a
    child process (:meth:`child_env`): a child resolves the environment's chain itself.
    ``source`` says where the access came from, for the logs; ``repr`` never shows a key.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    explicit: bool = False
    source: str = "environment"

    def __post_init__(self) -> None:
        if self.explicit and not self.access_key:
            raise ValueError("explicit S3 credentials need an access key")

    def __repr__(self) -> str:
        return (f"S3Config(endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
                f"explicit_keys={self.explicit}, source={self.source!r})")

    @classmethod
    def from_env(cls, endpoint_url: str | None = None) -> "S3Config":
        """Endpoint and credentials as this process sees them (resolved once, on the driver)."""
        import boto3

        session = boto3.session.Session()
        creds = session.get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
        return cls(
            endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL"),
            region=session.region_name or "us-east-1",
            access_key=frozen.access_key if frozen else None,
            secret_key=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None,
        )

    def resolved(self) -> "S3Config":
        """This access with keys and region filled in: keys as given, else the environment's
        (boto's chain, as :meth:`from_env`); the region as given, else the environment's."""
        if self.access_key:
            return replace(self, region=self.region or "us-east-1")
        base = S3Config.from_env(self.endpoint_url)
        return replace(base, region=self.region or base.region, source=self.source)

    def child_env(self) -> dict[str, str]:
        """Environment for a child process (spark-submit) so that its boto3 sees the same S3:
        endpoint and region as given, keys only when explicit."""
        out = {}
        if self.endpoint_url:
            out["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.region:
            out["AWS_DEFAULT_REGION"] = self.region
        if self.explicit:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key or ""
            if self.session_token:
                out["AWS_SESSION_TOKEN"] = self.session_token
        return out

    def client(self):
        return _client(self)


_CLIENTS: dict = {}
_CLIENTS_LOCK = threading.Lock()  # boto3 clients are thread-safe; making one is not


def _client(cfg: S3Config):
    client = _CLIENTS.get(cfg)
    if client is not None:
        return client
    with _CLIENTS_LOCK:
        return _CLIENTS.get(cfg) or _new_client(cfg)


def _new_client(cfg: S3Config):
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=cfg.endpoint_url,
        region_name=cfg.region,
        aws_access_key_id=cfg.access_key,
        aws_secret_access_key=cfg.secret_key,
        aws_session_token=cfg.session_token,
        config=Config(retries={"max_attempts": 8, "mode": "adaptive"},
                      max_pool_connections=16),
    )
    _CLIENTS[cfg] = client
    return client


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, prefix.strip("/")


def _private_tmp(path: str) -> str:
    """A temporary name beside ``path`` that no other process or thread writes."""
    return f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"


def write_atomically(path: str, data: bytes) -> None:
    """``path`` holds ``data`` whole or keeps what it held: written beside it, then renamed."""
    tmp = _private_tmp(path)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def join(root: str, key: str) -> str:
    return root.rstrip("/") + "/" + key.lstrip("/") if key else root


class StorageError(RuntimeError):
    """A root could not be listed, read or written; the message says which and why."""


class ChangedObject(StorageError):
    """An object is no longer the one that was listed (another ETag, size or mtime), or a
    read of it came back short: what was read must not be taken for the listed object."""


class Pin(NamedTuple):
    """What a listing saw of an object; reads made against it check it (``read_pinned``)."""

    size: int
    etag: str | None = None  # S3: checked with IfMatch
    mtime: str | None = None  # ISO-8601 UTC; local files: checked with the size

    @classmethod
    def of(cls, info: "ObjectInfo") -> "Pin":
        return cls(info.size, info.etag, info.mtime.isoformat())


def _expected_length(pin: Pin, start: int, end: int | None) -> int:
    return max(0, min(pin.size if end is None else end, pin.size) - start)


def _check_length(uri: str, data: bytes, pin: Pin, start: int, end: int | None) -> bytes:
    want = _expected_length(pin, start, end)
    if len(data) != want:
        raise ChangedObject(f"{uri} [{start}, {end}): read {len(data)} bytes, the listed "
                            f"object ({pin.size} bytes) holds {want} there: cut short or replaced")
    return data


class LocalStore:
    def __init__(self, root: str):
        self.root = os.path.abspath(root[len("file://"):] if root.startswith("file://") else root)

    def uri(self, key: str = "") -> str:
        return os.path.join(self.root, key) if key else self.root

    def path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        top = os.path.join(self.root, prefix)
        if os.path.isfile(top):
            st = os.stat(top)
            yield ObjectInfo(prefix, st.st_size, None, _utc(st.st_mtime))
            return
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                st = os.stat(full)
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                yield ObjectInfo(rel, st.st_size, None, _utc(st.st_mtime))

    def exists(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def stat(self, key: str) -> ObjectInfo:
        st = os.stat(self.path(key))
        return ObjectInfo(key, st.st_size, None, _utc(st.st_mtime))

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        with open(self.path(key), "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(end - start)

    def verify(self, key: str, pin: Pin) -> None:
        """Raise :class:`ChangedObject` unless the file has the pin's size (and mtime, where
        the pin has one)."""
        try:
            st = os.stat(self.path(key))
        except OSError as err:
            raise ChangedObject(f"{self.uri(key)} is gone since it was listed ({err})") from err
        if st.st_size != pin.size:
            raise ChangedObject(f"{self.uri(key)} is {st.st_size} bytes, {pin.size} when "
                                "listed: cut short or rewritten since")
        if pin.mtime is not None and _utc(st.st_mtime) != dt.datetime.fromisoformat(pin.mtime):
            raise ChangedObject(f"{self.uri(key)} was modified at {_utc(st.st_mtime).isoformat()}"
                                f", after it was listed ({pin.mtime})")

    def read_pinned(self, key: str, pin: Pin, start: int = 0, end: int | None = None) -> bytes:
        """``read``, checked against the listed object before and after, and length-checked."""
        self.verify(key, pin)
        data = self.read(key, start, end)
        self.verify(key, pin)
        return _check_length(self.uri(key), data, pin, start, end)

    def write(self, key: str, data: bytes) -> None:
        full = self.path(key)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        write_atomically(full, data)

    def put_file(self, key: str, local_path: str) -> None:
        """Move a finished local file into the store under ``key``."""
        full = self.path(key)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        tmp = _private_tmp(full)
        shutil.move(local_path, tmp)
        os.replace(tmp, full)

    def copy(self, src_key: str, dst_key: str) -> None:
        dst = self.path(dst_key)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = _private_tmp(dst)
        shutil.copyfile(self.path(src_key), tmp)
        os.replace(tmp, dst)

    def move(self, src_key: str, dst_key: str) -> None:
        dst = self.path(dst_key)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(self.path(src_key), dst)

    def delete(self, keys) -> None:
        for key in keys:
            try:
                os.remove(self.path(key))
            except FileNotFoundError:
                pass

    def delete_prefix(self, prefix: str) -> None:
        top = self.path(prefix)
        if os.path.isdir(top):
            shutil.rmtree(top)
        elif os.path.exists(top):
            os.remove(top)


class S3Store:
    def __init__(self, root: str, config: S3Config | None = None):
        self.bucket, self.prefix = split_s3(root)
        self.config = config or S3Config.from_env()

    @property
    def client(self):
        return self.config.client()

    def uri(self, key: str = "") -> str:
        base = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{base}/{key}" if key else base

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                for obj in page.get("Contents", ()):
                    yield ObjectInfo(obj["Key"][strip:], obj["Size"],
                                     obj.get("ETag", "").strip('"') or None,
                                     obj["LastModified"].astimezone(dt.timezone.utc))
        except Exception as err:
            raise StorageError(f"cannot list {self.uri(prefix)}: {_why(err)}") from err

    def exists(self, key: str) -> bool:
        try:
            self.stat(key)
            return True
        except StorageError:
            return False

    def stat(self, key: str) -> ObjectInfo:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as err:
            raise StorageError(f"cannot stat {self.uri(key)}: {_why(err)}") from err
        return ObjectInfo(key, head["ContentLength"], head.get("ETag", "").strip('"') or None,
                          head["LastModified"].astimezone(dt.timezone.utc))

    def _get(self, key: str, start: int, end: int | None, **extra) -> tuple[dict, bytes]:
        """A GET of ``[start, end)`` (the whole object from 0 to None): the response and
        its bytes; boto3's errors as they come."""
        if start or end is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra)
        return resp, resp["Body"].read()

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if end is not None and end <= start:
            return b""
        try:
            return self._get(key, start, end)[1]
        except Exception as err:
            raise StorageError(f"cannot read {self.uri(key)} [{start}, {end}): {_why(err)}") from err

    def read_pinned(self, key: str, pin: Pin, start: int = 0, end: int | None = None) -> bytes:
        """``read`` of the listed object only (``IfMatch`` its ETag; without one, the
        object's total size must be the pin's), length-checked."""
        if end is not None and end <= start:
            return b""
        try:
            resp, data = self._get(key, start, end,
                                   **({"IfMatch": f'"{pin.etag}"'} if pin.etag else {}))
        except Exception as err:
            if _code(err) in ("PreconditionFailed", "412"):
                raise ChangedObject(f"{self.uri(key)} is no longer the listed object (ETag "
                                    f"{pin.etag}): replaced since") from err
            if _code(err) in ("InvalidRange", "416"):
                raise ChangedObject(f"{self.uri(key)} [{start}, {end}): past its end, the "
                                    f"listed object had {pin.size} bytes: cut short") from err
            raise StorageError(f"cannot read {self.uri(key)} [{start}, {end}): {_why(err)}") from err
        total = _total_size(resp)
        if total is not None and total != pin.size:
            raise ChangedObject(f"{self.uri(key)} is {total} bytes, {pin.size} when listed")
        return _check_length(self.uri(key), data, pin, start, end)

    def write(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except Exception as err:
            raise StorageError(f"cannot write {self.uri(key)}: {_why(err)}") from err

    def put_file(self, key: str, local_path: str) -> None:
        """Upload a finished local file (multipart when large), then remove it."""
        try:
            self.client.upload_file(local_path, self.bucket, self._key(key))
        except Exception as err:
            raise StorageError(f"cannot write {self.uri(key)}: {_why(err)}") from err
        os.remove(local_path)

    def copy(self, src_key: str, dst_key: str) -> None:
        try:
            self.client.copy({"Bucket": self.bucket, "Key": self._key(src_key)},
                             self.bucket, self._key(dst_key))
        except Exception as err:
            raise StorageError(f"cannot copy {self.uri(src_key)}: {_why(err)}") from err

    def move(self, src_key: str, dst_key: str) -> None:
        """A server-side copy, then the source is deleted (S3 has no rename)."""
        self.copy(src_key, dst_key)
        self.delete([src_key])

    def delete(self, keys) -> None:
        keys = [self._key(k) for k in keys]
        for i in range(0, len(keys), 1000):
            chunk = keys[i:i + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
            except Exception as err:
                raise StorageError(f"cannot delete under {self.uri()}: {_why(err)}") from err

    def delete_prefix(self, prefix: str) -> None:
        self.delete([o.key for o in self.list(prefix)])


def open_object(uri: str, config: S3Config | None = None):
    """``(store, key)`` for one object's full URI (``s3://bucket/key`` or a local path)."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        return S3Store(f"s3://{bucket}", config), key
    path = os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)
    return LocalStore(os.path.dirname(path)), os.path.basename(path)


def tier_objects(root: str, config: S3Config | None = None):
    """``(store, key prefix)`` of a tiered-storage tier (``s3://bucket/prefix``, read with
    this configuration's client by ranged GETs, or a local folder): the object store
    ``kafkalog.tiered`` reads a remote segment through (its ``read``, ``list``, ``uri``)."""
    from kafkalog.tiered import LocalObjects, S3Objects

    if is_s3(root):  # the prefix verbatim: the plugin's key.prefix is any string ("tiered/")
        bucket, _, prefix = root[len("s3://"):].partition("/")
        if not bucket:
            raise ValueError(f"{root!r} names no bucket")
        return S3Objects(bucket, (config or S3Config.from_env()).client()), prefix
    path = os.path.abspath(root[len("file://"):] if root.startswith("file://") else root)
    return LocalObjects(path), ""


def delete_objects(uris, config: S3Config | None = None) -> None:
    """Delete objects by full URI (local paths or ``s3://``), a batch per store."""
    by_store: dict = {}
    for uri in uris:
        store, key = open_object(uri, config)
        by_store.setdefault(store.uri(), (store, []))[1].append(key)
    for store, keys in by_store.values():
        store.delete(keys)


def delete_uncommitted(uris, config: S3Config | None = None) -> None:
    """Delete files a commit refused (or never made): best effort; one left behind is an
    orphan, which maintenance's orphan removal deletes."""
    try:
        delete_objects(list(uris), config)
    except (StorageError, OSError):
        pass


def open_store(root: str, config: S3Config | None = None) -> LocalStore | S3Store:
    """The store for ``root`` (``s3://bucket/prefix`` or a local path)."""
    return S3Store(root, config) if is_s3(root) else LocalStore(root)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


def _code(err: Exception) -> str | None:
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code")
                   or response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "") or None
    return None


def _total_size(resp: dict) -> int | None:
    """An object's whole size from a GET's response (``Content-Range: bytes a-b/total``)."""
    content_range = resp.get("ContentRange")
    if content_range:
        total = content_range.rpartition("/")[2]
        return int(total) if total.isdigit() else None
    return resp.get("ContentLength")


def _why(err: Exception) -> str:
    response = getattr(err, "response", None)
    if isinstance(response, dict) and "Error" in response:
        e = response["Error"]
        return f"{e.get('Code')}: {e.get('Message') or ''}".rstrip(": ")
    return f"{type(err).__name__}: {err}"
