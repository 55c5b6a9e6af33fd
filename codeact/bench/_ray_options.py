"""What a sweep on Ray asks for (:class:`RayOptions`), checked before anything runs; ``ray`` itself is not imported
here.

:func:`import_ray` imports it when a sweep needs it, or says how to install it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BenchError, RayUnavailable

#: What to install when ``import ray`` fails.
RAY_INSTALL_HINT = "pip install 'codeact[ray]'"

#: A node label naming the node for :attr:`RayOptions.engines` (``ray start --labels '{"codeact-node": "gpu-a"}'``).
NODE_LABEL = "codeact-node"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str | int) -> int:
    """Bytes from ``2GiB``, ``512M``, ``1.5g`` or a plain number of bytes (binary units).

    Raises:
        BenchError: not a size.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise BenchError(f"{text!r} is not a size; write e.g. 512MiB, 2GiB or a number of bytes")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise BenchError(f"a size must be at least 1 byte, got {text!r}")
    return value


@dataclass(frozen=True)
class RayOptions:
    """Where and how a sweep runs on Ray (``BenchConfig(ray=RayOptions(...))``, ``codeact bench run --ray``).

    Attributes:
        address: ``"auto"`` (the cluster ``ray start`` made on this machine, or
            ``$RAY_ADDRESS``), ``"host:port"`` of a head node (or a ``ray://``
            client address), or ``"local"`` (a private one-machine Ray started
            for this run). When this process already called ``ray.init()``,
            that connection is used and this is ignored.
        cpus_per_episode: Ray CPUs one episode reserves; a node runs as many
            episodes at once as its CPUs allow.
        memory_per_episode: Ray memory one episode reserves: bytes, or a size
            such as ``"2GiB"``; ``None`` reserves none.
        engines: the Docker engine each node's CodeAct sandboxes use, by node:
            keys are a node's IP address, host name, Ray node id, the value of
            its ``codeact-node`` label, a ``label=value`` pair, or ``"*"`` for
            any other node; values are an engine URL (``"tcp://10.0.0.7:2376"``)
            or an engine entry as in ``CODEACT_ENGINES`` (``{"url": ...,
            "tls_dir": ...}``; paths are on that node). A JSON text or a JSON
            file path works too. A node no key names uses ``CODEACT_ENGINES``
            from its own environment if set, else its default engine
            (``DOCKER_HOST``, the Docker context, the local socket).
        pass_api_key: set the driver's API key (``BenchConfig.api_key`` or
            ``$OPENAI_API_KEY``) in the workers' environment through Ray's
            ``runtime_env``. Off by default: workers read ``OPENAI_API_KEY``
            from their node's environment. With tracing on, the driver's
            ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`` (often a token) travel
            with it too; the other ``OTEL_*`` variables always do.
        max_retries: times Ray runs an episode again after its worker or node
            died; then the episode is recorded as an error.

    Example::

        from codeact.bench import BenchConfig, RayOptions, run_bench

        run = run_bench(BenchConfig(suites=["tool-chains"], model="oracle", out="results",
                                    ray=RayOptions("10.0.0.2:6379", cpus_per_episode=1, memory_per_episode="2GiB")))
    """

    address: str | None = "auto"
    cpus_per_episode: float = 1.0
    memory_per_episode: int | str | None = None
    engines: Mapping[str, Any] | str = field(default_factory=dict)
    pass_api_key: bool = False
    max_retries: int = 3

    def validate(self) -> None:
        """Raises :class:`BenchError` for an option that cannot work, saying which and why."""
        if self.address is not None and not str(self.address).strip():
            raise BenchError("an empty Ray address; give auto, local or HOST:PORT")
        if self.address is not None:
            host_port(str(self.address))
        if not self.cpus_per_episode > 0:
            raise BenchError("cpus_per_episode must be > 0 (fractions such as 0.5 are fine)")
        if int(self.max_retries) < 0:
            raise BenchError("max_retries must be 0 or more")
        self.memory_bytes()
        self.node_engines()

    def memory_bytes(self) -> int | None:
        return None if self.memory_per_episode is None else parse_size(self.memory_per_episode)

    def node_engines(self) -> dict[str, Any]:
        """``engines`` as :class:`sandbox.engines.Engine` objects by node key.

        Raises:
            BenchError: unreadable JSON, or an entry that is not an engine.
        """
        raw: Any = self.engines
        if isinstance(raw, str):
            raw = _read_json(raw)
        if not isinstance(raw, Mapping):
            raise BenchError('Ray engines must map nodes to engines: {"10.0.0.7": "tcp://10.0.0.7:2376", ...}')
        from sandbox.engines import load_engines
        from sandbox.errors import SandboxError

        engines: dict[str, Any] = {}
        for key, value in raw.items():
            entry = {"url": value} if isinstance(value, str) else value
            if not isinstance(key, str) or not key or not isinstance(entry, Mapping):
                raise BenchError(f"Ray engines: the entry {key!r} needs a node key and an engine URL or object")
            try:
                (engines[key],) = load_engines(json.dumps([{"name": f"{key}", **entry}]))
            except SandboxError as exc:
                raise BenchError(f"Ray engines, node {key!r}: {exc}") from None
        return engines


def _read_json(text: str) -> Any:
    where = "inline JSON"
    if not text.lstrip().startswith(("{", "[")):
        where = text
        try:
            text = Path(text).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise BenchError(f"cannot read the Ray engines file {where}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BenchError(f"the Ray engines ({where}) are not valid JSON: {exc}") from None


def import_ray() -> Any:
    """The ``ray`` module, or :class:`RayUnavailable` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(f"running episodes on Ray needs the ray package, which is not installed here: "
                             f"{RAY_INSTALL_HINT}") from exc
    return ray


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` address; None for ``auto``, ``local`` and ``ray://`` addresses.

    Raises:
        BenchError: neither.
    """
    address = address.strip()
    if address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BenchError(f"the Ray address {address!r} is not HOST:PORT (nor auto or local); "
                         "give e.g. --ray 10.0.0.2:6379, the address `ray start --head` printed")
    return host.strip("[]"), int(port)
