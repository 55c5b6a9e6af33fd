"""A second, real Docker engine for tests: its own dockerd on TCP with mutual TLS.

The engine gets its own data and exec roots, its own containerd, its own
bridge interface and no iptables rules, so it cannot disturb the machine's
engine. (Not ``--bridge none``: dockerd then deletes ``docker0``, the other
engine's bridge.)
Certificates (a CA, a server and a client certificate) are made for each
start with ``cryptography``. :meth:`SecondEngine.kill` kills the engine
with SIGKILL, as when a machine goes away; :meth:`SecondEngine.start`
brings it back on the same port and data.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.engines import Engine, connect


def make_certificates(server_dir: Path, client_dir: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (Docker's file names)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2))

    def key_file(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)

    def cert_file(cert: x509.Certificate, path: Path) -> None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "codeact test engine CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(name: str, server: bool) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(valid[0]).not_valid_after(valid[1])
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    for d in (server_dir, client_dir):
        d.mkdir(parents=True, exist_ok=True)
        cert_file(ca, d / "ca.pem")
    key, cert = leaf("127.0.0.1", server=True)
    key_file(key, server_dir / "key.pem")
    cert_file(cert, server_dir / "cert.pem")
    key, cert = leaf("codeact tests", server=False)
    key_file(key, client_dir / "key.pem")
    cert_file(cert, client_dir / "cert.pem")


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def wait_for_engine(engine: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float, what: str,
                    cleanup: Callable[[], None]) -> None:
    """Return once ``engine`` answers; if ``proc`` exits first or ``timeout`` passes, ``cleanup()`` and raise
    with the tail of its ``log``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connect(engine, timeout=5).close()
            return
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                cleanup()
                raise RuntimeError(f"{what} did not start:\n{tail}") from None
            time.sleep(0.2)

class SecondEngine:
    """A dockerd of the tests' own, reachable at ``tcp://127.0.0.1:<port>`` with mutual TLS."""

    def __init__(self, name: str = "second", max_sessions: int = 4) -> None:
        # Short paths: containerd's sockets live under the exec root and Unix socket paths are limited.
        self.root = Path(tempfile.mkdtemp(prefix="ce-", dir="/tmp"))
        self.server_tls = self.root / "server-tls"
        self.client_tls = self.root / "client-tls"
        make_certificates(self.server_tls, self.client_tls)
        self.port = _free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.engine = Engine(name, self.url, tls_dir=str(self.client_tls), max_sessions=max_sessions)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "dockerd.log"
        self.bridge = f"cet{self.port}"

    def _make_bridge(self) -> None:
        if Path(f"/sys/class/net/{self.bridge}").exists():
            return
        # An address from the benchmarking range (RFC 2544): not routed anywhere.
        address = f"198.18.{self.port % 250}.1/24"
        for args in (["link", "add", "name", self.bridge, "type", "bridge"],
                     ["addr", "add", address, "dev", self.bridge], ["link", "set", self.bridge, "up"]):
            subprocess.run(["ip", *args], check=True, capture_output=True)

    def start(self, timeout: float = 60) -> None:
        self._make_bridge()
        args = ["dockerd", "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                "--pidfile", str(self.root / "dockerd.pid"), "-H", self.url, "--tlsverify",
                "--tlscacert", str(self.server_tls / "ca.pem"), "--tlscert", str(self.server_tls / "cert.pem"),
                "--tlskey", str(self.server_tls / "key.pem"), "--bridge", self.bridge, "--iptables=false",
                "--ip-masq=false", "--containerd-namespace", f"codeact-{self.port}",
                "--containerd-plugins-namespace", f"codeact-{self.port}-plugins"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        wait_for_engine(self.engine, self.proc, self.log, timeout, "the second Docker engine", self.stop)

    def client(self):  # a docker-py client
        from sandbox.engines import connect

        return connect(self.engine, timeout=30)

    def kill(self) -> None:
        """Kill the engine as when its machine goes away: dockerd, containerd, the shims and the containers."""
        if self.proc is None:
            return
        doomed = [self.proc.pid]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.root).encode() in cmdline:  # containerd and the shims name our roots
                doomed.append(int(entry.name))
                doomed += _children(int(entry.name))  # a shim's child is a container's init
        for pid in doomed:  # a container's init takes its whole PID namespace with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None
        # A machine that comes back has empty /run and no mounts: otherwise dockerd takes a
        # reused pid in containerd's old pid file for a live containerd and waits for it.
        self._unmount()
        shutil.rmtree(self.root / "exec", ignore_errors=True)

    def _unmount(self) -> None:
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            target = line.split()[1]
            if target.startswith(str(self.root) + "/"):
                subprocess.run(["umount", "-l", target], capture_output=True)

    def stop(self) -> None:
        """Stop the engine cleanly (it stops its containers and unmounts its layers)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None

    def remove(self) -> None:
        self.stop()
        self._unmount()
        shutil.rmtree(self.root, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def can_start_engines() -> str | None:
    """None when a second engine can be started here, else why not."""
    if shutil.which("dockerd") is None:
        return "dockerd is not installed (scripts/dev.sh setup installs it)"
    if os.geteuid() != 0:
        return "starting a Docker engine needs root"
    if shutil.which("ip") is None:
        return "the 'ip' command is missing (apt-get install iproute2)"
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return "the 'cryptography' package is missing (pip install -e '.[test]')"
    return None


class SSHServer:
    """An sshd of the tests' own on loopback, so that ``ssh://`` engines can be tried against this machine.

    Only key authentication, for root, with keys made here; ``ssh_config`` is
    a client config (``ssh -F``) that names the host ``codeact-test-engine``.
    """

    host_alias = "codeact-test-engine"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
        self.port = _free_port()
        for name in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.root / name)], check=True)
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        host_pub = (self.root / "host_key.pub").read_text().split()
        (self.root / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        (self.root / "sshd_config").write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {self.root}/host_key
            AuthorizedKeysFile {self.root}/authorized_keys
            PidFile {self.root}/sshd.pid
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PermitRootLogin prohibit-password
            StrictModes no
            UsePAM no
            AllowStreamLocalForwarding yes
            """))
        self.ssh_config = str(self.root / "ssh_config")
        Path(self.ssh_config).write_text(textwrap.dedent(f"""\
            Host {self.host_alias}
              HostName 127.0.0.1
              Port {self.port}
              User root
              IdentityFile {self.root}/client_key
              IdentitiesOnly yes
              UserKnownHostsFile {self.root}/known_hosts
              StrictHostKeyChecking yes
            """))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "sshd.log"

    def start(self, timeout: float = 20) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(self.root / "sshd_config")],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start:\n{self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            # The listener and every connection's own sshd: they share the session started above.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)


def can_start_sshd() -> str | None:
    if not (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")):
        return "sshd is not installed (scripts/dev.sh setup installs openssh-server)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "the OpenSSH client is not installed (apt-get install openssh-client)"
    if os.geteuid() != 0:
        return "the test sshd logs in as root and needs root"
    return None
