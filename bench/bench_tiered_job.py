"""The decode job on a remote segment (zstd + AES-GCM chunks, as Aiven's plugin stores it) against
the same segment as a plain ``.log``, both on a local moto S3 server, in one run (issue 34: aim
<= 1.5x).

Writes (once; reused) ``bench/out/tiered-<size>MiB.log`` (bench_tiered.py's generator:
uncompressed ~16 KiB v2 batches) and its ``.index`` (an entry every 4 KiB, as a broker writes
it). Then, on a moto server on 127.0.0.1 (started here, stopped by this process):

* ``local``: ``s3://bench/snap-local/b1/bench-0/00000000000000000000.log`` with its ``.index``;
* ``tier``: the plugin's three objects under ``s3://bench/tiered/`` (``tests/tiered_encoder.py``,
  chunk.size 4 MiB, compressed and encrypted with a 2048-bit RSA key; the offset index in
  ``.indexes``), and a snapshot ``s3://bench/snap-tier/`` holding only the
  ``__remote_log_metadata-0`` segment that makes it live (hand-packed records, the encoder's).

The job (``spark_jobs.decode.main``, ``local[--cores]``, ``--split-bytes`` of ``--split-mib``)
runs once on each as a warm-up (worker start, imports, the warehouse's tables: fixed costs), then
``--repeat`` times each, interleaved local, tier, tier, local, ...; each run into a fresh local
warehouse. Reported: the means, the ratio tier/local, both runs' records (must be equal) and
phases.

    .venv/bin/python bench/bench_tiered_job.py [--size-mib 1024] [--cores 2] [--split-mib 128]
                                                [--repeat 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

BUCKET = "bench"
TOPIC, TOPIC_ID, SEGMENT_ID = "bench", "lZ6vvmajTWKDBUTV6SQAtQ", "adh9f8BMS4anaUnD8KWfWg"
CHUNK = 4 * 1024 * 1024


def ensure_log(out: Path, size_mib: int) -> Path:
    import bench_job
    import bench_tiered

    log = out / f"tiered-{size_mib}MiB.log"
    if not log.exists():
        bench_tiered.make_log(log, size_mib << 20)
    if not log.with_suffix(".index").exists():
        bench_job.write_offset_index(log)
    return log


def upload(s3, log: Path, pem_dir: Path) -> dict:
    """The local segment, the tier's objects and the tier's metadata snapshot on S3."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    import kafkalog
    import tiered_encoder as enc
    from kafkalog.writer import SegmentWriter, WriteRecord

    data = log.read_bytes()
    index = log.with_suffix(".index").read_bytes()
    last = max(b.last_offset for b in kafkalog.iter_batches(str(log), verify_crc=False))
    local = f"snap-local/b1/{TOPIC}-0/00000000000000000000"
    s3.put_object(Bucket=BUCKET, Key=local + ".log", Body=data)
    s3.put_object(Bucket=BUCKET, Key=local + ".index", Body=index)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pem_dir / "bench.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    up = enc.upload(data, chunk_size=CHUNK, compression=True, key_id="bench",
                    public_key=key.public_key(), indexes={"offset": index}, prefix="tiered/",
                    topic=TOPIC, topic_id=TOPIC_ID, partition=0, start_offset=0,
                    end_offset=last, segment_id=SEGMENT_ID)
    stored = len(up.objects[up.key("log")])
    for k, v in up.objects.items():
        s3.put_object(Bucket=BUCKET, Key=k, Body=v)
    del up.objects
    records = [enc.segment_metadata_record(TOPIC, TOPIC_ID, 0, SEGMENT_ID, 0, last, len(data)),
               enc.segment_update_record(TOPIC, TOPIC_ID, 0, SEGMENT_ID,
                                         enc.COPY_SEGMENT_FINISHED, up.custom_metadata)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "__remote_log_metadata-0"
        w = SegmentWriter(folder)
        for r in records:
            w.append([WriteRecord(None, r, timestamp=1_700_000_000_000)])
        w.close()
        s3.put_object(Bucket=BUCKET, Key="snap-tier/b1/__remote_log_metadata-0/"
                      "00000000000000000000.log", Body=Path(w.path).read_bytes())
    return {"segment_bytes": len(data), "stored_bytes": stored, "last_offset": last}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--split-mib", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not 1 <= args.size_mib <= 1024:
        ap.error("--size-mib: 1..1024 (the plugin keeps sizes in Java ints)")
    args.out.mkdir(parents=True, exist_ok=True)
    log = ensure_log(args.out, args.size_mib)

    import boto3
    from moto.server import ThreadedMotoServer

    from spark_jobs import decode, layout
    from spark_jobs.session import build_session
    from spark_jobs.warehouse import Warehouse

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    work = Path(tempfile.mkdtemp(dir=args.out, prefix="tier-job-"))
    try:
        host, port = server.get_host_and_port()
        os.environ["AWS_ENDPOINT_URL"] = endpoint = f"http://{host}:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=BUCKET)
        (work / "keys").mkdir()
        t0 = time.perf_counter()
        facts = upload(s3, log, work / "keys")
        facts["upload_s"] = round(time.perf_counter() - t0, 1)
        os.environ[layout.TIER_KEYS_ENV] = str(work / "keys")
        inputs = {"local": ["--input", f"s3://{BUCKET}/snap-local"],
                  "tier": ["--input", f"s3://{BUCKET}/snap-tier", layout.TIERED_STORAGE_FLAG,
                           f"s3://{BUCKET}/tiered/"]}
        spark = build_session("bench-tiered-job", master=f"local[{args.cores}]",
                              conf={"spark.sql.shuffle.partitions": str(args.cores)})

        def run(kind: str, n: int) -> tuple[float, dict]:
            wh = work / f"wh-{kind}-{n}"
            shutil.rmtree(wh, ignore_errors=True)
            Warehouse(str(wh)).begin_run("bench-tables", reset=True)  # tables: not timed
            t0 = time.perf_counter()
            s = decode.main([*inputs[kind], "--output", str(wh), "--run-id", "bench",
                             "--split-bytes", str(args.split_mib << 20)], spark=spark)
            seconds = time.perf_counter() - t0
            shutil.rmtree(wh, ignore_errors=True)
            return seconds, s

        try:
            warm = {k: run(k, 0)[0] for k in inputs}
            order = [k for i in range(args.repeat)
                     for k in (("local", "tier") if i % 2 == 0 else ("tier", "local"))]
            runs = {k: [] for k in inputs}
            for i, kind in enumerate(order):
                runs[kind].append(run(kind, i + 1))
        finally:
            spark.stop()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    mean = {k: sum(t for t, _ in v) / len(v) for k, v in runs.items()}
    tier_records = {s["records"] for _, s in runs["tier"]}
    local_records = {s["records"] for _, s in runs["local"]}
    # the tier's run also decodes its snapshot's two __remote_log_metadata records
    assert {r - 2 for r in tier_records} == local_records and len(local_records) == 1, \
        (tier_records, local_records)
    out = {
        "size_mib": args.size_mib, "cores": args.cores, "split_mib": args.split_mib,
        "load_average": [round(x, 2) for x in os.getloadavg()], **facts,
        "records": local_records.pop(),
        "tasks": {k: v[0][1]["tasks"] for k, v in runs.items()},
        "warm_up_s": {k: round(v, 2) for k, v in warm.items()},
        "runs_s": {k: [round(t, 2) for t, _ in v] for k, v in runs.items()},
        "mean_s": {k: round(v, 2) for k, v in mean.items()},
        "ratio_tier_vs_local": round(mean["tier"] / mean["local"], 3),
        "timings": {k: v[-1][1]["timings"] for k, v in runs.items()},
    }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["ratio_tier_vs_local"] <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
