"""A real RFC 3161 timestamp authority on 127.0.0.1 for the tests: OpenSSL's `ts -reply` behind HTTP.

`tsa_pki` (once per session) makes a root CA and a TSA certificate signed by it
(`extendedKeyUsage = critical,timeStamping`) with the `openssl` command line;
`local_tsa` serves `openssl ts -reply` for each `application/timestamp-query`
posted to it, from a thread, and says how to point a repository at it.

The TSA embeds only its own certificate in its tokens (no `certs =` chain):
`rfc3161-client` parses strict DER, and OpenSSL's chain comes out as an
unsorted SET it rejects.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import yaml

CA_REL = "trust/tsa-root.pem"
"""Where `configure` commits the CA in a repository."""


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {r.stderr.strip()}")


def make_ca(folder: Path, name: str = "Test Lab Root CA") -> Path:
    """A self-signed root CA (`ca.pem`, `ca.key`) in `folder`; returns the certificate's path."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "3650", "-subj", f"/CN={name}", "-config", "/dev/null",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=folder)
    return folder / "ca.pem"


def make_tsa_cert(folder: Path, ca_dir: Path, name: str = "Test Lab TSA") -> None:
    """`tsa.pem`/`tsa.key` in `folder`, signed by the CA in `ca_dir`, usable only for timestamping."""
    (folder / "tsa.ext").write_text("basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n"
                                    "extendedKeyUsage = critical,timeStamping\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "tsa.key",
             "-out", "tsa.csr", "-subj", f"/CN={name}", "-config", "/dev/null", cwd=folder)
    _openssl("x509", "-req", "-in", "tsa.csr", "-CA", str(ca_dir / "ca.pem"), "-CAkey", str(ca_dir / "ca.key"),
             "-CAcreateserial", "-out", "tsa.pem", "-days", "3650", "-extfile", "tsa.ext", cwd=folder)
    (folder / "serial").write_text("01\n")
    (folder / "tsa.cnf").write_text(f"""\
[tsa]
default_tsa = tsa_config
[tsa_config]
dir = {folder}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.pem
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = sha256, sha384, sha512
accuracy = secs:1
clock_precision_digits = 3
ordering = yes
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
""")
    # The same authority, embedding its chain (CA and its own certificate) as OpenSSL orders it.
    (folder / "chain.pem").write_bytes((ca_dir / "ca.pem").read_bytes() + (folder / "tsa.pem").read_bytes())
    text = (folder / "tsa.cnf").read_text()
    (folder / "tsa-chain.cnf").write_text(text.replace("signer_digest", "certs = $dir/chain.pem\nsigner_digest"))


@dataclass
class Pki:
    """A CA and a TSA certificate it signed, made once per session."""

    folder: Path
    ca_pem_path: Path


@pytest.fixture(scope="session")
def tsa_pki(tmp_path_factory) -> Pki:
    folder = tmp_path_factory.mktemp("tsa-pki")
    ca = make_ca(folder)
    make_tsa_cert(folder, folder)
    return Pki(folder, ca)


class _Handler(BaseHTTPRequestHandler):
    server: "_TsaServer"

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        query = self.rfile.read(length)
        if self.headers.get("Content-Type") != "application/timestamp-query":
            self.send_error(415, "expected application/timestamp-query")
            return
        self.server.requests += 1
        reply = self.server.reply(query)
        self.send_response(200)
        self.send_header("Content-Type", "application/timestamp-reply")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass  # quiet: pytest shows stderr of failing tests


class _TsaServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pki: Pki, port: int = 0, chain: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.pki = pki
        self.config = pki.folder / ("tsa-chain.cnf" if chain else "tsa.cnf")
        self.requests = 0
        self._lock = threading.Lock()  # one `ts -reply` at a time: it rewrites its serial file

    def reply(self, query: bytes) -> bytes:
        with self._lock, tempfile.TemporaryDirectory() as tmp:
            q, r = Path(tmp) / "q.tsq", Path(tmp) / "r.tsr"
            q.write_bytes(query)
            _openssl("ts", "-reply", "-config", str(self.config), "-queryfile", str(q),
                     "-out", str(r), cwd=self.pki.folder)
            return r.read_bytes()


@dataclass
class LocalTsa:
    """A running TSA: where to post, the CA to trust, and how a repository is pointed at it."""

    url: str
    ca_pem_path: Path
    server: _TsaServer | None

    @property
    def requests(self) -> int:
        """Requests answered so far (by the server now running)."""
        return self.server.requests if self.server else 0

    def stop(self) -> None:
        """Take the authority off the network: its port is closed until `start`."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def start(self) -> None:
        """Serve again, on the same url."""
        if self.server is None:
            self.server = _serve(_TsaServer(self._pki, int(self.url.rsplit(":", 1)[1].strip("/"))))

    @property
    def _pki(self) -> Pki:
        return Pki(self.ca_pem_path.parent, self.ca_pem_path)

    def configure(self, repo: Path, *, require: bool = False, timeout_s: float = 5, url: str | None = None,
                  ca_pem: Path | None = None, commit: bool = True) -> None:
        """Write the `timestamping:` block into `repo`'s logbook.yaml and the CA under trust/; commit both."""
        ca = repo / CA_REL
        ca.parent.mkdir(parents=True, exist_ok=True)
        ca.write_bytes(Path(ca_pem or self.ca_pem_path).read_bytes())
        settings = repo / "logbook.yaml"
        cfg = (yaml.safe_load(settings.read_text()) if settings.exists() else None) or {}
        cfg["timestamping"] = {"authorities": [{"url": url or self.url, "ca": CA_REL}],
                               "require": require, "timeout_s": timeout_s}
        settings.write_text(yaml.safe_dump(cfg, sort_keys=False))
        if commit:
            for args in (["add", "logbook.yaml", CA_REL], ["commit", "-q", "-m", "timestamping: a local TSA"]):
                subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def _serve(server: _TsaServer) -> _TsaServer:
    threading.Thread(target=server.serve_forever, name="local-tsa", daemon=True).start()
    return server


@pytest.fixture
def local_tsa(tsa_pki) -> Iterator[LocalTsa]:
    server = _serve(_TsaServer(tsa_pki))
    tsa = LocalTsa(f"http://127.0.0.1:{server.server_address[1]}/", tsa_pki.ca_pem_path, server)
    try:
        yield tsa
    finally:
        tsa.stop()


@pytest.fixture
def chained_tsa(tsa_pki) -> Iterator[LocalTsa]:
    """Like `local_tsa`, but its tokens embed the CA and its own certificate: an unsorted SET, as OpenSSL writes
    it when its `certs =` names a chain (strict DER parsers refuse it)."""
    server = _serve(_TsaServer(tsa_pki, chain=True))
    tsa = LocalTsa(f"http://127.0.0.1:{server.server_address[1]}/", tsa_pki.ca_pem_path, server)
    try:
        yield tsa
    finally:
        tsa.stop()


@contextmanager
def silent_tsa() -> Iterator[str]:
    """A URL whose server accepts connections and never answers: only a timeout ends a request."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/"


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
