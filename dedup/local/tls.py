"""Throwaway certificates for local TLS services (tests, the chaos runner).

A private CA and one server certificate it signs, valid for ``127.0.0.1``,
``::1`` and ``localhost``, made with the ``openssl`` command line tool. Never
use them outside a test: the keys are unencrypted files.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from dedup.exceptions import ServiceError
from dedup.local.paths import require_program


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA's certificate, the server's certificate and its key."""

    ca: Path
    cert: Path
    key: Path


def make_certificates(folder: Path, days: int = 7) -> TlsFiles:
    """Make (or reuse) a CA and a server certificate under ``folder``. Safe to repeat."""
    folder = Path(folder)
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    if all(path.exists() for path in (files.ca, files.cert, files.key)):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    openssl = require_program("openssl", "install Debian's package: apt-get install openssl")
    ca_key = folder / "ca.key"
    csr = folder / "server.csr"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n"
                   "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth,clientAuth\n")
    steps = [
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(files.ca), "-days", str(days), "-subj", "/CN=dedup-local-test-ca"],
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(files.key),
         "-out", str(csr), "-subj", "/CN=localhost"],
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(files.ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(files.cert), "-days", str(days), "-extfile", str(ext)],
    ]
    for argv in steps:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise ServiceError(f"openssl {argv[1]} failed ({result.returncode}): "
                               f"{result.stderr.strip()[-400:]}")
    return files
