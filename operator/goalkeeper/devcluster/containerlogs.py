"""The pod runner's kubelet log endpoint: `GET /containerLogs/{namespace}/{pod}/{container}`
over HTTPS on 127.0.0.1, so `kubectl logs` and a step's `pod_logs` work against the dev
cluster as against a real node.

The API server reaches it at the node's InternalIP and `daemonEndpoints.kubeletEndpoint`
port; it does not verify a kubelet's serving certificate unless told a CA for it, so a
throwaway self-signed one serves. A pod's output is kept as two files (see
`podrunner.log_paths`): the answer is its stdout, then its stderr, across restarts;
`tailLines`, `limitBytes` and `sinceSeconds` (as "the whole file") are honoured, `follow`
answers what there is now.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

HOST = "127.0.0.1"
_PREFIX = "/containerLogs/"


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "goalkeeper-dev-kubelet")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "kubelet.crt", folder / "kubelet.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def tail(text: bytes, lines: int | None, limit: int | None) -> bytes:
    """The last `lines` lines of `text`, then its first `limit` bytes, as a kubelet cuts."""
    if lines is not None:
        kept = text.splitlines(keepends=True)
        text = b"".join(kept[-lines:]) if lines > 0 else b""
    if limit is not None:
        text = text[:limit]
    return text


def _int(query: dict[str, list[str]], key: str) -> int | None:
    values = query.get(key)
    if not values:
        return None
    try:
        return max(0, int(values[0]))
    except ValueError:
        return None


class ContainerLogServer:
    """Serves the logs `paths(namespace, pod)` names (stdout, stderr) until `stop()`."""

    def __init__(self, paths: Callable[[str, str], tuple[Path, Path]]) -> None:
        self._paths = paths
        self._tls_dir = Path(tempfile.mkdtemp(prefix="goalkeeper-kubelet-"))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = server.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        cert, key = _self_signed(self._tls_dir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="container-logs", daemon=True
        )

    def start(self) -> ContainerLogServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for path in self._tls_dir.iterdir():
            path.unlink()
        self._tls_dir.rmdir()

    def answer(self, target: str) -> tuple[int, bytes]:
        """The status and body for one request path (with its query)."""
        url = urlsplit(target)
        if not url.path.startswith(_PREFIX):
            return 404, b"not found\n"
        parts = [unquote(p) for p in url.path[len(_PREFIX) :].split("/")]
        if len(parts) != 3 or not all(parts) or any(p in (".", "..") for p in parts):
            return 400, b"want /containerLogs/NAMESPACE/POD/CONTAINER\n"
        namespace, pod, _container = parts
        stdout, stderr = self._paths(namespace, pod)
        found = [p.read_bytes() for p in (stdout, stderr) if p.is_file()]
        if not found:
            return 404, f"no logs of pod {namespace}/{pod} on this node\n".encode()
        query = parse_qs(url.query)
        text = tail(b"".join(found), _int(query, "tailLines"), _int(query, "limitBytes"))
        return 200, text
