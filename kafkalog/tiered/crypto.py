"""The plugin's encryption: AES-256-GCM chunks under a per-segment data key, the data key
wrapped with the operator's RSA key.

Per segment the plugin draws a 256-bit AES data key and 32 random bytes of associated data
(``aad``). The manifest stores ``"<keyId>:<base64 of RSA(dataKey)>"`` and the aad in base64.
The wrapping is BouncyCastle's ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``: RSA-OAEP
(RFC 8017) with SHA3-512 as the digest *and* in MGF1, and an empty label (BouncyCastle's
CipherSpi maps that name to ``OAEPParameterSpec("SHA3-512", "MGF1",
MGF1ParameterSpec("SHA3-512"), PSource.PSpecified.DEFAULT)``). OpenSSL, behind the
``cryptography`` package, refuses SHA-3 in OAEP, so the unpadding is done here over the raw
RSA operation (:func:`oaep_decode`); it is the same code for any hash, and the tests check it
against ``cryptography``'s OAEP with SHA-512.

Every stored chunk (and every index of ``.indexes``) is, as the plugin's
EncryptionChunkEnumeration writes it::

    IV (12 bytes, Java's default GCM IV) | ciphertext | GCM tag (16 bytes, appended by Java)

with the segment's ``aad`` as associated data, the same for every chunk. The tag makes a
flipped byte, a cut chunk or another segment's key an error instead of other bytes. (The aad
does not number the chunks: chunks of one segment swapped in place would still verify; the
reader's size checks catch most of that, not all.)

A key ring maps key ids to RSA private keys; ``KeyRing.from_pem_files`` names each key by its
file name without ``.pem``, as the plugin's ``encryption.key.pairs`` settings name them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field

from ..errors import ChunkError, CodecUnavailableError, KeyRingError
from .manifest import Encryption

IV_SIZE = 12  # SegmentEncryptionMetadataV1.IV_SIZE
TAG_SIZE = 16  # AesEncryptionProvider.GCM_TAG_LENGTH = 128 bits
DATA_KEY_SIZE = 32  # AES-256 (AesEncryptionProvider.KEY_SIZE)
#: the digest of both OAEP and its MGF1
OAEP_HASH = "sha3_512"
PEM_SUFFIX = ".pem"


def _cryptography():
    """The ``cryptography`` package, imported when an encrypted segment needs it."""
    try:
        import cryptography.exceptions
        import cryptography.hazmat.primitives.asymmetric.rsa
        import cryptography.hazmat.primitives.ciphers.aead
        import cryptography.hazmat.primitives.serialization
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CodecUnavailableError("encrypted tiered segments need the 'cryptography' package: "
                                    "pip install 'kafkalog[tiered]'") from err
    return cryptography


def mgf1(seed: bytes, length: int, hash_name: str = OAEP_HASH) -> bytes:
    """RFC 8017 B.2.1: hash(seed || counter) for counter 0, 1, ... cut to ``length``."""
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.new(hash_name, seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def oaep_decode(em: bytes, hash_name: str = OAEP_HASH, label: bytes = b"") -> bytes:
    """EME-OAEP decoding (RFC 8017 7.1.2 step 3) of the encoded message ``em`` (the RSA
    output, ``k`` bytes): the message, or ValueError. Every check is made before the one
    error is raised, which says nothing about which failed."""
    h_len = hashlib.new(hash_name).digest_size
    k = len(em)
    if k < 2 * h_len + 2:
        raise ValueError(f"an RSA key of {k} bytes is too small for OAEP with {hash_name}")
    masked_seed, masked_db = em[1:1 + h_len], em[1 + h_len:]
    seed = _xor(masked_seed, mgf1(masked_db, h_len, hash_name))
    db = _xor(masked_db, mgf1(seed, k - h_len - 1, hash_name))
    rest = db[h_len:].lstrip(b"\x00")
    good = hmac.compare_digest(db[:h_len], hashlib.new(hash_name, label).digest())
    good &= em[0] == 0
    good &= rest[:1] == b"\x01"
    if not good:
        raise ValueError("OAEP decoding error")
    return rest[1:]


def oaep_encode(message: bytes, k: int, seed: bytes, hash_name: str = OAEP_HASH,
                label: bytes = b"") -> bytes:
    """EME-OAEP encoding (RFC 8017 7.1.1 step 2), the twin of :func:`oaep_decode`: the
    ``k``-byte encoded message for ``seed`` (``h_len`` random bytes), for :mod:`.writer`."""
    h_len = hashlib.new(hash_name).digest_size
    if len(message) > k - 2 * h_len - 2 or len(seed) != h_len:
        raise ValueError(f"OAEP with {hash_name}: {len(message)} bytes do not fit {k} bytes")
    db = (hashlib.new(hash_name, label).digest() + bytes(k - len(message) - 2 * h_len - 2)
          + b"\x01" + message)
    masked_db = _xor(db, mgf1(seed, k - h_len - 1, hash_name))
    return b"\x00" + _xor(seed, mgf1(masked_db, h_len, hash_name)) + masked_db


def _rsa_raw(private, ciphertext: bytes) -> bytes:
    """``ciphertext ** d mod n`` with the key's CRT values, as ``k`` bytes."""
    numbers = private.private_numbers()
    pub = numbers.public_numbers
    k = (pub.n.bit_length() + 7) // 8
    if len(ciphertext) != k:
        raise ValueError(f"{len(ciphertext)} bytes of ciphertext for a {k}-byte RSA key")
    c = int.from_bytes(ciphertext, "big")
    if c >= pub.n:
        raise ValueError("ciphertext not below the RSA modulus")
    m1 = pow(c, numbers.dmp1, numbers.p)
    m2 = pow(c, numbers.dmq1, numbers.q)
    m = m2 + ((numbers.iqmp * (m1 - m2)) % numbers.p) * numbers.q
    if pow(m, pub.e, pub.n) != c:  # a damaged key's CRT values give another m: say so
        raise ValueError("the private key's values do not agree with each other")
    return m.to_bytes(k, "big")


@dataclass(frozen=True)
class KeyRing:
    """Key id -> RSA private key (a ``cryptography`` object)."""

    keys: dict = field(default_factory=dict)

    @classmethod
    def from_pem_files(cls, paths) -> "KeyRing":
        """One key per PEM file (PKCS#8 ``BEGIN PRIVATE KEY``, unencrypted); its id is the
        file name without ``.pem`` (``key-b.pem`` -> ``key-b``)."""
        keys: dict = {}
        for path in paths:
            name = os.path.basename(os.fspath(path))
            key_id = name[:-len(PEM_SUFFIX)] if name.endswith(PEM_SUFFIX) else name
            if key_id in keys:
                raise KeyRingError(f"{path}: a second private key with id {key_id!r}")
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as err:
                raise KeyRingError(f"cannot read private key {path}: "
                                   f"{err.strerror or err}") from err
            keys[key_id] = load_private_key(data, os.fspath(path))
        return cls(keys)

    @property
    def ids(self) -> list[str]:
        return sorted(self.keys)

    def unwrap(self, encryption: Encryption, where: str) -> bytes:
        """The segment's AES data key; :class:`KeyRingError` naming ``where`` (the manifest)
        when the ring does not hold its key id or that key does not unwrap it."""
        private = self.keys.get(encryption.key_id)
        if private is None:
            held = ", ".join(self.ids) or "none"
            raise KeyRingError(f"{where}: the data key is wrapped with key id "
                               f"{encryption.key_id!r}, which the key ring does not hold "
                               f"(it holds: {held})")
        try:
            key = oaep_decode(_rsa_raw(private, encryption.wrapped_key))
        except ValueError as err:
            raise KeyRingError(f"{where}: private key {encryption.key_id!r} does not unwrap the "
                               f"data key ({err}): not the key it was wrapped with, or the "
                               "wrapped key is damaged") from err
        if len(key) != DATA_KEY_SIZE:
            raise KeyRingError(f"{where}: the unwrapped data key is {len(key)} bytes, not "
                               f"{DATA_KEY_SIZE} (AES-256)")
        return key


def load_private_key(data: bytes, where: str):
    """An unencrypted RSA private key from PEM (PKCS#8; PKCS#1 is read too)."""
    c = _cryptography()
    try:
        key = c.hazmat.primitives.serialization.load_pem_private_key(data, password=None)
    except TypeError as err:  # a password-protected PEM
        raise KeyRingError(f"{where}: an encrypted private key; give it unencrypted "
                           "(PKCS#8 PEM, as the plugin reads it)") from err
    except (ValueError, c.exceptions.UnsupportedAlgorithm) as err:
        raise KeyRingError(f"{where}: not a PEM private key ({err})") from err
    if not isinstance(key, c.hazmat.primitives.asymmetric.rsa.RSAPrivateKey):
        raise KeyRingError(f"{where}: a {type(key).__name__}, not an RSA private key")
    return key


class ChunkCipher:
    """AES-256-GCM for one segment's chunks and indexes: ``decrypt(stored) -> plaintext``."""

    def __init__(self, data_key: bytes, aad: bytes) -> None:
        c = _cryptography()
        self._invalid_tag = c.exceptions.InvalidTag
        self._aead = c.hazmat.primitives.ciphers.aead.AESGCM(data_key)
        self._aad = aad

    def decrypt(self, stored) -> bytes:
        """Raises :class:`ChunkError` (without a position: the caller adds where)."""
        if len(stored) < IV_SIZE + TAG_SIZE:
            raise ChunkError(f"{len(stored)} bytes, fewer than the IV and GCM tag "
                             f"({IV_SIZE + TAG_SIZE})")
        view = memoryview(stored)
        try:
            return self._aead.decrypt(bytes(view[:IV_SIZE]), view[IV_SIZE:], self._aad)
        except self._invalid_tag as err:
            raise ChunkError("AES-GCM tag does not verify: damaged bytes, or a data key that "
                             "is not this segment's") from err
