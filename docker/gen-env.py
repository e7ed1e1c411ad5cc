#!/usr/bin/env python3
"""Write docker/.env from docker/.env.example, filling every empty value with a fresh secret.

    python3 docker/gen-env.py [OUTPUT]      (default: docker/.env beside this script)

Standard library only (runs on the host, before any image exists). Refuses to overwrite an
existing file: secrets that Postgres and MinIO already hold must not change under them.
"""

from __future__ import annotations

import base64
import os
import secrets
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def fresh_value(name: str) -> str:
    if "FERNET" in name:
        return base64.urlsafe_b64encode(os.urandom(32)).decode()  # what Fernet expects
    return secrets.token_urlsafe(32)  # [A-Za-z0-9_-]: safe in URLs and shell words


def fill(example: str) -> str:
    lines = []
    for line in example.splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#") and not value.strip():
            line = f"{name}={fresh_value(name.strip())}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE / ".env"
    if out.exists():
        print(f"gen-env: {out} exists; not overwriting it", file=sys.stderr)
        return 1
    text = fill((HERE / ".env.example").read_text())
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    print(f"gen-env: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
