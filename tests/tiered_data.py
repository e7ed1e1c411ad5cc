"""Inputs of the tiered-storage tests: the real segment of ``tests/data/tiered`` (README there)
and RSA key pairs, made once per test process."""

from __future__ import annotations

import functools
import hashlib
import os
import struct
from pathlib import Path

DATA = Path(__file__).parent / "data" / "tiered"
LOG = DATA / "00000000000000000000.log"
#: the segment's sha256, as tests/data/tiered/README.md and the corpus README give it
LOG_SHA256 = "b69aca538f525e41377f23853a7247de4621da5b242daccf199b927402157368"
#: one aborted transaction (version 0, producer 7, offsets 3..5, LSO 3): .txnindex's 34 bytes
TXN_INDEX = struct.pack(">hqqqq", 0, 7, 3, 5, 3)


def log_bytes() -> bytes:
    data = LOG.read_bytes()
    assert hashlib.sha256(data).hexdigest() == LOG_SHA256
    return data


def indexes(with_txn: bool = False) -> dict:
    """The segment's indexes as the plugin gets them (LogSegmentData), by the manifest's names."""
    out = {
        "offset": (DATA / "00000000000000000000.index").read_bytes(),
        "timestamp": (DATA / "00000000000000000000.timeindex").read_bytes(),
        "producerSnapshot": (DATA / "00000000000000000013.snapshot").read_bytes(),
        "leaderEpoch": (DATA / "leader-epoch-checkpoint").read_bytes(),
    }
    if with_txn:
        out["transaction"] = TXN_INDEX
    return out


@functools.cache
def private_key(key_id: str):
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem(key) -> bytes:
    """PKCS#8 PEM, unencrypted: what the plugin's RsaKeyReader reads."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def key_files(folder, *ids: str, swap: dict | None = None) -> list[str]:
    """``<id>.pem`` for each id in ``folder``; ``swap`` maps an id to the id whose key its
    file holds instead (a wrong key under the right name)."""
    paths = []
    for key_id in ids:
        path = os.path.join(folder, f"{key_id}.pem")
        with open(path, "wb") as f:
            f.write(pem(private_key((swap or {}).get(key_id, key_id))))
        paths.append(path)
    return paths
