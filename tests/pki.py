"""Certificates for tests of TLS, made with the ``openssl`` command in a test's directory.

``make_pki(root)`` writes, each as ``NAME.pem`` and ``NAME.key``:
- ``ca``: the CA that signs the others (``test-ca``);
- ``server``: the server's certificate, for 127.0.0.1 and localhost;
- ``client``: a client certificate (extended key usage clientAuth);
- ``elsewhere``: a server certificate for another host only (``sampler.elsewhere.test``);
- ``other-ca``: a second CA, which signed none of them (a client given it trusts no server here).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from prerequisites import missing

ELSEWHERE = "sampler.elsewhere.test"


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        missing("SAMPLER_TESTS_WITHOUT_OPENSSL", "the openssl command is missing (apt-get install openssl)")
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(root: Path) -> Path:
    """The certificates above under ``root`` (made if missing); ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *key, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN=test-{ca}", cwd=root)
    (root / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (root / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    (root / "elsewhere.ext").write_text(f"subjectAltName=DNS:{ELSEWHERE}\n")
    for name in ("server", "client", "elsewhere"):
        _openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=root)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=root)
    return root
