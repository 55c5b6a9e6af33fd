"""The sandbox's network allow-list (sandbox.network): a proxy on the host is the container's only route.

Everything runs on this machine's loopback: an HTTP and an HTTPS server started
here, and test host names (``api.test``, ``evil.test``...) that the policy's
``resolve=`` mapping sends to them; no real DNS. The Docker tests share one
sandbox and attack it from the code in its kernel, then check the host.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.server
import json
import os
import pickle
import secrets as secrets_module
import socket
import ssl
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.network import NetworkPolicy, NetworkPolicyError, NetworkProxy, public

# --------------------------------------------------------------------------- the policy (no Docker)


def test_policy_normalises_and_checks_patterns() -> None:
    policy = NetworkPolicy(allow=["API.Example.com.", "*.data.example.org", "10.0.0.7"])
    assert policy.allow == ("api.example.com", "*.data.example.org", "10.0.0.7")
    assert policy.allows("api.example.com") and policy.allows("x.y.data.example.org")
    assert not policy.allows("data.example.org") and not policy.allows("evil-data.example.org")
    assert not policy.allows("api.example.com.evil.test")
    assert not NetworkPolicy(allow=["*.0.0.1"]).allows("127.0.0.1")  # a wildcard never matches an address
    with pytest.raises(NetworkPolicyError, match="name"):
        NetworkPolicy(allow=["a.test"], name="x\r\nX-Injected: 1")
    for bad, said in [("https://api.example.com", "not a URL"), ("api.example.com:443", "ports="),
                      ("*", "first label"), ("a.*.org", "first label"), ("*.org", "two labels"),
                      ("exa mple.com", "not a host name"), ("-x.com", "not a host name")]:
        with pytest.raises(NetworkPolicyError, match=said):
            NetworkPolicy(allow=[bad])
    with pytest.raises(NetworkPolicyError, match="list of host names"):
        NetworkPolicy(allow="api.example.com")  # type: ignore[arg-type]
    with pytest.raises(NetworkPolicyError, match="empty"):
        NetworkPolicy(allow=[])
    with pytest.raises(NetworkPolicyError, match="port number"):
        NetworkPolicy(allow=["a.test"], ports=(0,))
    with pytest.raises(NetworkPolicyError, match="not an IP address"):
        NetworkPolicy(allow=["a.test"], resolve={"a.test": "localhost"})
    with pytest.raises(NetworkPolicyError, match="wildcards"):
        NetworkPolicy(allow=["a.test"], allow_private=["*.test"])
    with pytest.raises(NetworkPolicyError, match="ca_bundle"):
        NetworkPolicy(allow=["a.test"], ca_bundle="/nonexistent/ca.pem")


def test_policy_checks_secrets_and_hides_them() -> None:
    key = "Bearer sk-" + "7" * 20
    policy = NetworkPolicy(allow=["api.test"], secrets={"API.test": {"Authorization": key}})
    assert dict(policy.secrets["api.test"]) == {"Authorization": key}
    assert key not in repr(policy) and "Authorization" in repr(policy)
    assert key not in json.dumps(policy.environment())
    assert policy.environment()["SANDBOX_NETWORK_SECRET_HOSTS"] == "api.test"
    assert pickle.loads(pickle.dumps(policy)) == policy
    with pytest.raises(TypeError):
        policy.secrets["api.test"]["Authorization"] = "x"  # type: ignore[index]
    for headers, said in [({"Bad Name": "x"}, "not a header name"), ({"Host": "x"}, "sets the header"),
                          ({"X-Key": "a\r\nX-Evil: 1"}, "one line"), ({"X-Key": "ключ"}, "ASCII"), ({}, "non-empty")]:
        with pytest.raises(NetworkPolicyError, match=said):
            NetworkPolicy(allow=["api.test"], secrets={"api.test": headers})
    with pytest.raises(NetworkPolicyError, match="not in allow"):
        NetworkPolicy(allow=["api.test"], secrets={"other.test": {"X-Key": "k"}})


def test_policy_from_options(tmp_path: Path) -> None:
    assert NetworkPolicy.from_options([]) is None
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"api.test": {"X-Key": "k"}}))
    policy = NetworkPolicy.from_options(["a.test,b.test", "*.c.test"], str(secrets))
    assert policy is not None and policy.allow == ("a.test", "b.test", "*.c.test", "api.test")
    secrets.write_text("{nope")
    with pytest.raises(NetworkPolicyError, match="not JSON"):
        NetworkPolicy.from_options(["a.test"], str(secrets))
    with pytest.raises(NetworkPolicyError, match="cannot read"):
        NetworkPolicy.from_options(["a.test"], str(tmp_path / "missing.json"))


def test_public_addresses() -> None:
    for address in ["127.0.0.1", "10.1.2.3", "172.17.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "::1",
                    "fe80::1", "224.0.0.1", "::ffff:127.0.0.1", "100.64.0.1", "fd00::1", "240.0.0.1"]:
        assert not public(address), address
    for address in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"]:
        assert public(address), address


def test_cli_options_make_the_policy(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from codeact.cli import cli

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["no code"]))
    runner = CliRunner(env={"CODEACT_SCRIPTED_REPLIES": str(replies)})
    result = runner.invoke(cli, ["run", "--no-log", "--backend", "local", "--allow-host", "api.test", "hi"])
    assert result.exit_code != 0 and "needs the docker backend" in result.output
    bad = tmp_path / "secrets.json"
    bad.write_text("[1]")
    result = runner.invoke(cli, ["run", "--allow-host", "api.test", "--network-secrets", str(bad), "hi"])
    assert result.exit_code != 0 and "must hold an object" in result.output
    result = runner.invoke(cli, ["run", "--allow-host", "https://api.test", "hi"])
    assert result.exit_code != 0 and "not a URL" in result.output
    result = CliRunner(env={"CODEACT_ALLOW_HOSTS": "api.test https://evil.test"}).invoke(cli, ["run", "hi"])
    assert result.exit_code != 0 and "not a URL" in result.output
    for command in (["chat"], ["bench", "run"], ["mcp", "serve"]):
        assert "--allow-host" in runner.invoke(cli, [*command, "--help"]).output, command
    ui_help = runner.invoke(cli, ["ui", "--help"]).output
    assert "--sandbox-allow-host" in ui_help and "--network-secrets" in ui_help


# --------------------------------------------------------------------------- servers on loopback


class _Seen:
    """What the test servers received (the headers of each request)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []


def _handler(seen: _Seen) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.do_GET()

        def parse_request(self) -> bool:
            ok = super().parse_request()
            if "/keep" in self.path:  # a server that ignores "Connection: close" reads what follows the request
                self.close_connection = False
            return ok

        def do_GET(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            if self.headers.get("Transfer-Encoding") == "chunked":
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size).decode()
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass
            seen.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            body = json.dumps({"path": self.path, "tls": isinstance(self.connection, ssl.SSLSocket)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def _certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for api.test and tls.test: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "codeact test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.test")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("api.test"), x509.DNSName("tls.test")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class Servers:
    def __init__(self, directory: Path) -> None:
        self.seen = _Seen()
        self.ca, cert, key = _certificate(directory)
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.seen))
        self.https = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.seen))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.https.socket = context.wrap_socket(self.https.socket, server_side=True)
        self.http_port, self.https_port = self.http.server_address[1], self.https.server_address[1]
        for server in (self.http, self.https):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def close(self) -> None:
        for server in (self.http, self.https):
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    s = Servers(tmp_path_factory.mktemp("tls"))
    yield s
    s.close()


#: The secret: built at run time, so that no file of the test holds it, and searched for in the sandbox by
#: its hash (the code that searches never holds it whole either).
SECRET = "Bearer sk-" + secrets_module.token_hex(16)


def _policy(servers: Servers, **options: Any) -> NetworkPolicy:
    return NetworkPolicy(
        allow=["api.test", "tls.test", "evil.test", "*.wild.test"], ports=None,
        allow_private=["api.test", "tls.test", "a.wild.test"],
        resolve={"api.test": "127.0.0.1", "tls.test": "127.0.0.1", "evil.test": "127.0.0.1",
                 "a.wild.test": "127.0.0.1"},
        secrets={"tls.test": {"Authorization": SECRET}}, ca_bundle=str(servers.ca), **options)


# --------------------------------------------------------------------------- the proxy on the host (no Docker)


def _raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_proxy_refuses_malformed_requests(servers: Servers) -> None:
    proxy = NetworkProxy(_policy(servers, idle_timeout=1.0))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    proxy.listen(listener)
    try:
        assert _raw(port, b"GET /relative HTTP/1.1\r\nHost: api.test\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _raw(port, b"CONNECT api.test HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _raw(port, b"GET http://u:p@api.test/ HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _raw(port, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        injected = f"GET http://api.test:{servers.http_port}/ HTTP/1.1\r\nX-A: 1\nHost: internal\r\n\r\n"
        assert _raw(port, injected.encode()).startswith(b"HTTP/1.1 400")
        smuggle = (f"POST http://api.test:{servers.http_port}/a HTTP/1.1\r\nContent-Length: 5\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode()
        assert _raw(port, smuggle).startswith(b"HTTP/1.1 400")
        # A second request riding on the first's connection never reaches the server.
        count = len(servers.seen.requests)
        two = (f"GET http://api.test:{servers.http_port}/keep-one HTTP/1.1\r\n\r\n"
               "GET /two HTTP/1.1\r\nHost: internal\r\n\r\n").encode()
        assert _raw(port, two).startswith(b"HTTP/1.1 200")
        assert [r["path"] for r in servers.seen.requests[count:]] == ["/keep-one"]
        count = len(servers.seen.requests)
        chunked = (f"POST http://api.test:{servers.http_port}/keep-chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                   "\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: internal\r\n\r\n").encode()
        assert _raw(port, chunked).startswith(b"HTTP/1.1 200")
        assert [(r["path"], r["body"]) for r in servers.seen.requests[count:]] == [("/keep-chunked", "hello")]
        # A body by its Content-Length, after "100 Continue" from the server.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(f"POST http://api.test:{servers.http_port}/post HTTP/1.1\r\nContent-Length: 5\r\n"
                      "Expect: 100-continue\r\n\r\n".encode())
            assert c.recv(100).startswith(b"HTTP/1.1 100")
            c.sendall(b"hello")
            answer = b"".join(iter(lambda: c.recv(65536), b""))
        assert answer.startswith(b"HTTP/1.1 200") and servers.seen.requests[-1]["body"] == "hello"
        ok = _raw(port, f"GET http://api.test:{servers.http_port}/x HTTP/1.1\r\nHost: evil.test\r\n"
                        "Proxy-Authorization: x\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\r\n".encode())
        assert ok.startswith(b"HTTP/1.1 200") and b"Connection: close" in ok
        headers = servers.seen.requests[-1]["headers"]
        assert headers["Host"] == f"api.test:{servers.http_port}"  # the proxy's Host, not the client's
        assert "Proxy-Authorization" not in headers and "X-Drop" not in headers
    finally:
        proxy.close()
    assert not any(t.name == "sandbox-network-proxy" for t in threading.enumerate())


# --------------------------------------------------------------------------- through a real sandbox

@pytest.fixture(scope="module")
def box(servers: Servers, docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from sandbox import DockerSandbox
    from sandbox.packages import PackagePolicy

    policy = _policy(servers, max_connections=8, header_timeout=2.0, idle_timeout=3.0)
    wheelhouse = tmp_path_factory.mktemp("wheelhouse")
    with zipfile.ZipFile(wheelhouse / "house_pkg-1.0-py3-none-any.whl", "w") as z:  # exists nowhere but here
        z.writestr("house_pkg/__init__.py", "WHERE = 'wheelhouse'\n")
        z.writestr("house_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: house_pkg\nVersion: 1.0\n")
        z.writestr("house_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("house_pkg-1.0.dist-info/RECORD", "")
    packages = PackagePolicy(cache_dir=str(tmp_path_factory.mktemp("package-cache")), wheelhouse=str(wheelhouse),
                             offline=True)
    with DockerSandbox(network=policy, timeout=60, package_policy=packages) as sb:
        sb.upload(servers.ca.read_bytes(), "ca.pem")
        r = sb.run(f"""
import json, ssl, urllib.request, urllib.error
HTTP, HTTPS = {servers.http_port}, {servers.https_port}
def get(url, timeout=10):
    ctx = ssl.create_default_context(cafile='/workspace/ca.pem')
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.reason + ' | ' + e.read().decode()
    except urllib.error.URLError as e:
        return None, str(e.reason)
""")
        assert r.ok, r
        yield sb


def _value(sb: Any, expr: str) -> Any:
    r = sb.run(f"import json as _j; print(_j.dumps({expr}))")
    assert r.ok, r
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.docker
def test_listed_hosts_reached_over_http_and_https(box: Any) -> None:
    status, body = _value(box, "get(f'http://api.test:{HTTP}/hello?x=1')")
    assert status == 200 and json.loads(body) == {"path": "/hello?x=1", "tls": False}
    status, body = _value(box, "get(f'https://api.test:{HTTPS}/tunnel')")  # CONNECT, TLS end to end
    assert status == 200 and json.loads(body) == {"path": "/tunnel", "tls": True}
    status, body = _value(box, "get(f'http://a.wild.test:{HTTP}/w')")  # a wildcard entry
    assert status == 200
    env = _value(box, "{k: v for k, v in __import__('os').environ.items() if 'proxy' in k.lower()}")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128" and "127.0.0.1" in env["NO_PROXY"]


@pytest.mark.docker
def test_unlisted_and_rebound_hosts_refused_naming_the_policy(box: Any) -> None:
    status, text = _value(box, "get(f'http://other.test:{HTTP}/')")
    assert status == 403 and "sandbox network policy" in text and "other.test" in text
    status, text = _value(box, "get(f'https://other.test:{HTTPS}/')")  # CONNECT refused: the tunnel error says why
    assert status is None and "403" in text and "sandbox network policy" in text
    # evil.test is allowed by name, but resolves to loopback and is not in allow_private: refused.
    status, text = _value(box, "get(f'http://evil.test:{HTTP}/')")
    assert status == 403 and "non-public" in text and "127.0.0.1" in text
    status, text = _value(box, "get(f'http://127.0.0.1:{HTTP}/')")  # bypassing NO_PROXY: no route at all
    assert status is None
    r = box.run("import http.client\n"  # the host's own address, asked of the proxy
                "c = http.client.HTTPConnection('127.0.0.1', 3128)\n"
                "c.request('GET', f'http://127.0.0.1:{HTTP}/')\n"
                "r = c.getresponse()\n"
                "print(r.status, r.reason)")
    assert r.stdout.strip() == "403 Forbidden by the sandbox network policy: 127.0.0.1 is not allowed", r
    r = box.run("import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)")
    assert r.error is not None and "unreachable" in r.error.message, r.error


@pytest.mark.docker
def test_secret_header_used_but_never_visible_inside(box: Any, servers: Servers) -> None:
    before = len(servers.seen.requests)
    status, body = _value(box, "get(f'http://tls.test:{HTTPS}/with-key')")  # plain HTTP in, TLS out
    assert status == 200 and json.loads(body) == {"path": "/with-key", "tls": True}
    arrived = [r for r in servers.seen.requests[before:] if r["path"] == "/with-key"]
    assert arrived and arrived[0]["headers"]["Authorization"] == SECRET
    status, text = _value(box, "get(f'https://tls.test:{HTTPS}/')")  # a tunnel could not carry it: refused
    assert status is None and "use http://tls.test/" in text
    # Now the attacker looks for it: environment of every process it can read, every file it can read,
    # and the kernel's own memory (the proxy's answers passed through it). Searched by a prefix and the
    # hash of the whole: the searching code never holds the secret itself. First a decoy built the same
    # way and planted in a file, the environment of a child process and the kernel's memory: the search
    # must find it there, or its "nothing found" below would mean nothing.
    decoy = "Bearer sk-" + secrets_module.token_hex(16)
    box.upload(decoy.encode(), "decoy.txt")
    r = box.run(SEARCH + "\n"
                "held = open('/workspace/decoy.txt').read()\n"
                "child = subprocess.Popen(['sleep', '30'], env={'DECOY': held})\n"
                f"try:\n    print(json.dumps(search({decoy[:12].encode()!r}, {_digest(decoy)!r}, {len(decoy)})))\n"
                "finally:\n    child.kill(); child.wait()\n"
                "import os; os.remove('/workspace/decoy.txt')")
    assert r.ok, r
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert "/workspace/decoy.txt" in found["where"], found
    assert any(w.startswith("kernel memory") for w in found["where"]), found
    assert any(w.startswith("environ of") for w in found["where"]), found
    r = box.run(f"print(json.dumps(search({SECRET[:12].encode()!r}, {_digest(SECRET)!r}, {len(SECRET)})))")
    assert r.ok, r
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["where"] == [] and found["regions"] > 10, found


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


#: The attacker's search, defined in the kernel: ``search(prefix, sha256 hex of the whole, length)``.
SEARCH = r"""
import hashlib, json, os, re, subprocess
def search(prefix, digest, n):
    def hits(data):
        found, i = 0, data.find(prefix)
        while i >= 0:
            found += hashlib.sha256(data[i:i + n]).hexdigest() == digest
            i = data.find(prefix, i + 1)
        return found
    where = []
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        try:
            with open(f'/proc/{pid}/environ', 'rb') as f:
                if hits(f.read()):
                    where.append('environ of ' + pid)
        except OSError:
            pass
    files = subprocess.run(['grep', '-rlF', '--devices=skip', '-s', prefix.decode(), '/', '--exclude-dir=proc',
                            '--exclude-dir=sys', '--exclude-dir=dev'], capture_output=True).stdout.decode().split()
    for path in files:
        try:
            with open(path, 'rb') as f:
                if hits(f.read()):
                    where.append(path)
        except OSError:
            pass
    regions = 0
    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps:
            m = re.match(r'([0-9a-f]+)-([0-9a-f]+) r', line)
            if not m or '[vvar' in line or '[vsyscall' in line:
                continue
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            regions += 1
            if hits(data):
                where.append('kernel memory ' + line.split()[0])
    return {"where": where, "regions": regions, "files": len(files)}
"""


@pytest.mark.docker
def test_install_works_as_without_a_policy(box: Any) -> None:
    """Packages still come from the host (here: an offline wheelhouse), never through the proxy."""
    before = len(box.network_requests)
    r = box.run("install('house-pkg')\nimport house_pkg\nprint(house_pkg.WHERE)")
    assert r.ok and r.stdout.strip().endswith("\nwheelhouse"), r
    assert len(box.network_requests) == before


@pytest.mark.docker
def test_every_request_is_recorded(box: Any) -> None:
    seen: list[Any] = []
    box.network_listeners.append(seen.append)
    try:
        _value(box, "[get(f'http://api.test:{HTTP}/rec'), get(f'http://nope.test:{HTTP}/'), "
                    "get(f'https://api.test:{HTTPS}/rec')]")
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        box.network_listeners.remove(seen.append)
    by_host = {(r.host, r.method): r for r in seen}
    ok = by_host["api.test", "GET"]
    assert ok.allowed and ok.status == 200 and ok.kind == "http" and ok.address == "127.0.0.1"
    assert ok.bytes_sent > 0 and ok.bytes_received > 0 and 0 < ok.duration < 10
    refused = by_host["nope.test", "GET"]
    assert not refused.allowed and refused.status == 403 and "sandbox network policy" in refused.reason
    tunnel = by_host["api.test", "CONNECT"]
    assert tunnel.allowed and tunnel.status == 200 and tunnel.kind == "tunnel" and tunnel.bytes_received > 1000
    assert {r.host for r in box.network_requests} >= {"api.test", "nope.test"}
    assert json.dumps([r.to_json() for r in box.network_requests])  # JSON as it is logged


def _proxy(box: Any) -> Any:
    return box._kernel.proxy


def _wait_idle(box: Any) -> None:
    deadline = time.monotonic() + 5
    while _proxy(box).active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _proxy(box).active == 0


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fd_targets() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return out


@pytest.mark.docker
def test_hostile_code_cannot_exhaust_the_host(box: Any, servers: Servers) -> None:
    """Floods of connections, a huge head, a slow head and an idle tunnel, from the code in the kernel."""
    fds = _fds()
    r = box.run("""
import select, socket, time
held = [socket.create_connection(('127.0.0.1', 3128), timeout=5) for _ in range(300)]
time.sleep(0.3)
""")
    assert r.ok, r
    assert 0 < _proxy(box).active <= 8  # the 8 allowed at once hold their places
    assert _fds() - fds < 40, "the flood must not hold host file descriptors"
    # Every connection gets an answer: 503 at once beyond the 8, 408 for those 8 after header_timeout (2 s).
    r = box.run("""
answers, deadline = {}, time.monotonic() + 8
while len(answers) < len(held) and time.monotonic() < deadline:
    ready, _, _ = select.select([s for s in held if s not in answers], [], [], 0.5)
    for s in ready:
        answers[s] = s.recv(64)[:12]
print(sorted((a.decode(), list(answers.values()).count(a)) for a in set(answers.values())))
""")
    assert r.ok, r
    counts = dict(json.loads(r.stdout.strip().replace("(", "[").replace(")", "]").replace("'", '"')))
    # (A slow machine may free and refill the 8 places while the flood is still being made.)
    assert set(counts) <= {"HTTP/1.1 503", "HTTP/1.1 408"} and sum(counts.values()) == 300, counts
    assert counts["HTTP/1.1 503"] >= 250 and _proxy(box).peak == 8, (counts, _proxy(box).peak)
    assert box.run("for s in held: s.close()").ok
    _wait_idle(box)
    r = box.run("""
import socket, time
def send(data, wait=8):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=wait)
    try:
        s.sendall(data)
    except OSError:
        pass
    try:
        return s.recv(200)
    except OSError as e:
        return repr(e).encode()
    finally:
        s.close()
huge = send(b'GET http://api.test/ HTTP/1.1\\r\\nX-Big: ' + b'a' * 1_000_000 + b'\\r\\n\\r\\n')
t = time.monotonic()
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)   # slowloris: one byte every 0.3 s
answer = b''
for ch in b'GET http://api.test/ HTTP/1.1\\r\\nX-Slow: ' + b'z' * 100:
    try:
        s.send(bytes([ch]))
        time.sleep(0.3)
    except OSError:
        break
    s.setblocking(False)
    try:
        answer = s.recv(200)
        if answer: break
    except BlockingIOError:
        pass
    s.setblocking(True)
slow = time.monotonic() - t
print(huge[:12], answer[:12], round(slow, 1))
""")
    assert r.ok, r
    assert "b'HTTP/1.1 431'" in r.stdout and "b'HTTP/1.1 408'" in r.stdout, r.stdout
    assert float(r.stdout.split()[-1]) < 10  # cut at header_timeout (2 s); the whole head would take 30 s
    # An idle tunnel is closed after idle_timeout (3 s).
    r = box.run(f"""
import socket, time
s = socket.create_connection(('127.0.0.1', 3128), timeout=15)
s.sendall(b'CONNECT api.test:{servers.https_port} HTTP/1.1\\r\\n\\r\\n')
first = s.recv(100)
t = time.monotonic()
rest = s.recv(100)
print(first[:12], rest, round(time.monotonic() - t, 1))
""")
    assert r.ok, r
    # idle_timeout is 3 s: the tunnel is closed then, not when the client pleases
    assert "b'HTTP/1.1 200'" in r.stdout and " b'' " in r.stdout and float(r.stdout.split()[-1]) < 12, r.stdout
    _wait_idle(box)
    status, _ = _value(box, "get(f'http://api.test:{HTTP}/after')")  # still serving
    assert status == 200


@pytest.mark.docker
def test_nothing_left_after_close(servers: Servers, docker_ready: None) -> None:
    from sandbox import DockerSandbox
    from sandbox.container import docker_client

    client = docker_client()
    networks = {n.id for n in client.networks.list()}
    from sandbox import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="runc runtime"):
        DockerSandbox(network=_policy(servers), runtime="runsc")
    with pytest.raises(TypeError, match="NetworkPolicy"):
        DockerSandbox(network=["api.test"])  # type: ignore[arg-type]
    never = DockerSandbox(network=_policy(servers))  # made, never started: no thread, nothing to leave
    never.close()
    assert not _proxy(never)._thread.is_alive() and _proxy(never)._closed
    sb = DockerSandbox(network=_policy(servers))
    fetch = "import urllib.request as u; print(u.urlopen('http://api.test:%d/').status)" % servers.http_port
    with sb:
        assert sb.run(fetch).stdout.strip() == "200"
        name = sb.name
        proxy = _proxy(sb)
        # The container goes away under the session: the new one gets the proxy's socket, the old one's is closed.
        old = sb._kernel.container_id
        client.api.remove_container(old, force=True)
        r = sb.run(fetch)
        assert r.stdout.strip() == "200" and sb._kernel.container_id != old, r
        assert len(proxy._servers) == 1
        listening = {os.readlink(f"/proc/self/fd/{sock.fileno()}") for server in proxy._servers
                     for sock in server.sockets}
        assert len(listening) == 1
    assert proxy._closed and not proxy._thread.is_alive()
    assert not any(t.name == "sandbox-network-proxy" and t.ident == proxy._thread.ident
                   for t in threading.enumerate())
    assert not listening & set(_fd_targets())  # the socket in the container's namespace is closed
    assert not client.containers.list(all=True, filters={"name": name})
    assert {n.id for n in client.networks.list()} == networks  # no network made, none left


@pytest.mark.docker
def test_no_network_without_a_policy(docker_ready: None) -> None:
    from sandbox import DockerSandbox

    with DockerSandbox() as sb:
        r = sb.run("import os, socket\n"
                   "print(sorted(k for k in os.environ if 'proxy' in k.lower()))\n"
                   "socket.create_connection(('127.0.0.1', 3128), timeout=2)")
    assert r.stdout.strip() == "[]" and r.error is not None and r.error.type == "ConnectionRefusedError"
    assert sb.network_policy is None and sb.network_requests == []


@pytest.mark.docker
def test_agent_logs_network_requests(servers: Servers, tmp_path: Path, docker_ready: None) -> None:
    from codeact import CodeActAgent, NetworkPolicy as Exported, ScriptedModel
    from codeact.runlog import RunLog

    assert Exported is NetworkPolicy
    code = (f"import urllib.request, urllib.error\n"
            f"print(urllib.request.urlopen('http://api.test:{servers.http_port}/agent').status)\n"
            f"try:\n    urllib.request.urlopen('http://nope.test:{servers.http_port}/')\n"
            f"except urllib.error.HTTPError as e:\n    print(e.code, e.reason)\n"
            f"final_answer('done')")
    log = RunLog(tmp_path / "runs.db")
    agent = CodeActAgent(ScriptedModel([f"```python\n{code}\n```"]), log=log,
                         sandbox_options={"network": _policy(servers)})
    result = agent.run("fetch")
    assert result.status == "success", result
    events = [e for e in log.get_events(result.run_id) if e["type"] == "NetworkRequest"]
    hosts = {(e["payload"]["host"], e["payload"]["allowed"], e["payload"]["status"]) for e in events}
    assert hosts == {("api.test", True, 200), ("nope.test", False, 403)}
    assert all(SECRET not in json.dumps(e) for e in events)
    log.close()


def test_request_events_reach_the_page_and_the_terminal() -> None:
    import io

    from rich.console import Console

    from codeact.events import NetworkRequest
    from codeact.cli.render import Renderer
    from codeact.ui._wire import event_wire

    record = {"host": "evil.test", "port": 80, "method": "GET", "allowed": False, "status": 403,
              "reason": "the sandbox network policy refuses evil.test", "duration": 0.002}
    event = NetworkRequest(run_id="r", step=1, host="evil.test", method="GET", allowed=False, status=403,
                           record=record)
    wire = event_wire(event, lambda mime, data: "")
    assert wire["type"] == "NetworkRequest" and wire["port"] == 80 and "refuses evil.test" in wire["reason"]
    out = io.StringIO()
    Renderer(console=Console(file=out, width=200), err_console=Console(file=io.StringIO()), live=False).event(event)
    assert "evil.test:80 refused" in out.getvalue()
