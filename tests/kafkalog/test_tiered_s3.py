"""kafkalog.tiered over S3 (the moto server of conftest.py): ranged GETs of only the chunks a
byte range needs (counted at boto3's GetObject), errors of a bucket as one line, and the CLI
on s3:// URIs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import boto3
import pytest

from kafkalog.errors import ChunkError, RemoteObjectError
from kafkalog.tiered import KeyRing, RemoteSegment, S3Objects

from tests import tiered_data as td
from tests import tiered_encoder as enc

pytestmark = pytest.mark.pipeline  # an S3 server (moto), as the repository marks such tests

LOG = td.log_bytes()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def bucket(s3_bucket, s3_endpoint):
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    gets = []
    client.meta.events.register(
        "before-parameter-build.s3.GetObject",
        lambda params, **_: gets.append((params["Key"], params.get("Range"))))
    return s3_bucket, client, gets


def _put(client, bucket, up):
    for key, data in up.objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    return KeyRing.from_pem_files(td.key_files(tmp_path_factory.mktemp("k"), "key-a", "key-b"))


def _upload(**kw):
    opts = dict(chunk_size=1000, compression=True, key_id="key-b",
                public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    opts.update(kw)
    return enc.upload(LOG, **opts)


def test_a_byte_range_gets_only_its_chunks(bucket, ring):
    name, client, gets = bucket
    up = _upload()
    _put(client, name, up)
    seg = RemoteSegment.open(up.key("rsm-manifest"), store=S3Objects(name, client), key_ring=ring)
    assert gets == [(up.key("rsm-manifest"), "bytes=0-1048575")]  # the manifest, one GET
    starts = [sum(up.chunk_sizes[:i]) for i in range(len(up.chunk_sizes) + 1)]
    for start, end in [(0, 1), (2500, 4200), (13000, len(LOG)), (999, 1000), (0, len(LOG))]:
        gets.clear()
        assert seg.read(start, end) == LOG[start:end]
        first, last = start // 1000, (end - 1) // 1000
        assert gets == [(up.key("log"), f"bytes={starts[i]}-{starts[i + 1] - 1}")
                        for i in range(first, last + 1)], (start, end)
    gets.clear()
    assert seg.index_bytes("timestamp") == td.indexes()["timestamp"]
    r = seg.manifest.indexes["timestamp"]
    assert gets == [(up.key("indexes"), f"bytes={r.position}-{r.position + r.size - 1}")]
    assert hashlib.sha256(seg.read()).hexdigest() == td.LOG_SHA256


def test_bucket_faults_are_errors(bucket, ring):
    name, client, _ = bucket
    up = _upload()
    _put(client, name, up)
    store = S3Objects(name, client)
    client.put_object(Bucket=name, Key=up.key("log"), Body=up.objects[up.key("log")][:-3])
    seg = RemoteSegment.open(up.key("rsm-manifest"), store=store, key_ring=ring)
    with pytest.raises(ChunkError, match=r"chunk 13 of 14 .*short chunk, the object holds"):
        seg.read()
    client.delete_object(Bucket=name, Key=up.key("log"))
    with pytest.raises(RemoteObjectError, match=rf"s3://{name}/{up.key('log')}: no such object"):
        seg.read(0, 10)
    with pytest.raises(RemoteObjectError, match="no such object"):
        RemoteSegment.open(up.key("rsm-manifest") + "x.rsm-manifest", store=store)


def run(*argv):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kafkalog", *map(str, argv)],
                          capture_output=True, timeout=120, env=env)


def test_the_cli_on_s3_uris(bucket, tmp_path):
    name, client, _ = bucket
    up = _upload(indexes=td.indexes(with_txn=True))
    _put(client, name, up)
    client.put_object(Bucket=name, Key="/clicks-1/00000000000000000042.log", Body=LOG)
    client.put_object(Bucket=name, Key="/clicks-1/00000000000000000042.index",
                      Body=td.indexes()["offset"])
    keys = td.key_files(tmp_path, "key-b")
    manifest = f"s3://{name}/{up.key('rsm-manifest')}"
    out = tmp_path / "out.log"
    p = run("tiered", "cat", "--private-key", keys[0], manifest, "-o", out)
    assert p.returncode == 0, p.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == td.LOG_SHA256
    # minio-rsm's plain objects: a leading "/" in the key, copied as they are
    p = run("tiered", "cat", f"s3://{name}//clicks-1/00000000000000000042.log", "-o", "-")
    assert p.returncode == 0 and p.stdout == LOG
    p = run("tiered", "ls", f"s3://{name}/")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert lines[0].startswith("clicks-1 00000000000000000042 plain index=16 log=13751")
    assert lines[1].startswith("orders-3 00000000000000000000 adh9f8BMS4anaUnD8KWfWg aiven")
    assert lines[-1] == ("Summary: 2 segments (aiven 1, plain 1), 0 incomplete, 0 other objects; "
                         "states unknown (live, orphan or deleted copy): give --metadata "
                         "SNAPSHOT/__remote_log_metadata-N")
    p = run("dump", "--private-key", keys[0], manifest)
    assert p.returncode == 0 and b"Summary: 13 batches, 13 records, no findings" in p.stdout
    p = run("tiered", "cat", "--private-key", keys[0], manifest + "x.rsm-manifest", "-o", out)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1
    assert b"no such object" in p.stderr and b"Traceback" not in p.stderr
