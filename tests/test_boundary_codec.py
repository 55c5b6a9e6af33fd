"""The value codec's trust boundary, tested as the attacker: hostile code in the real Docker sandbox.

The host decodes what code in the sandbox sends (call arguments, Jupyter
messages, file listings). Each test plays code that builds its own payloads
with the raw runtime (``sandbox_runtime`` / ``sandbox_wire``), the way hostile
code can, and then checks the HOST: that its other threads kept running, that
it never opened the files the payload named, that its memory stayed bounded.
The numbers are the findings of security issue 18. Targets are files the
test creates, never real host files.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

# Builds a call payload by hand (the in-sandbox encoder refuses these values, so hostile code does not use it)
# and sends it through the runtime's own call path, which waits for the host's answer.
RAW_CALL = """
import json, struct, sandbox_runtime as s

def raw_call(name, header):
    payload = struct.pack('<4sII', b'CXC1', len(header), 0) + header
    original = s._encode_call
    s._encode_call = lambda *a: [payload]
    try:
        return s.call(name, (), {})
    finally:
        s._encode_call = original

def args(*nodes):
    return json.dumps({'$': 'tuple', 'v': [{'$': 'tuple', 'v': list(nodes)}, {}]}).encode()

def attempt(label, name, header):
    try:
        print(label, 'accepted', repr(raw_call(name, header))[:300])
    except Exception as e:
        print(label, type(e).__name__, str(e)[:300])
"""


class Ticker:
    """A host thread that ticks every 10 ms; ``longest_gap`` is how long it was ever kept from running."""

    def __init__(self) -> None:
        self.longest_gap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.01):
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now

    def __enter__(self) -> "Ticker":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


def echo(*args: Any, **kwargs: Any) -> str:
    """Returns what it was given, as text."""
    return repr((args, kwargs))[:2000]


# --- 2: a number the sandbox sized must not stop the host --------------------------------------------------------


@pytest.mark.parametrize("target", ["echo", "__sandbox_install__"])
def test_a_huge_fraction_does_not_freeze_the_host(target: str) -> None:
    from sandbox import DockerSandbox

    with DockerSandbox(functions=[echo], timeout=5, max_run_time=10) as sb:
        sb.run("1")
        code = RAW_CALL + """
import random
def unrelated_ints(bits):  # gcd() is slow only when the parts share no shortcut
    return [{'$': 'int', 'x': format(random.getrandbits(bits) | 1 << (bits - 1), 'x')} for _ in range(2)]
# 6 Mbit: the finding (29 s of GIL); 1 Mbit: an int the host accepts alone (about a second of gcd)
for label, bits in (('6-Mbit', 6 * 2**20), ('1-Mbit', 2**20 - 8)):
    attempt(label, TARGET, args({'$': 'fraction', 'v': unrelated_ints(bits)}))
attempt('ok', TARGET, args({'$': 'fraction', 'v': [{'$': 'int', 'x': 'f' * 2000}, 3]}))
""".replace("TARGET", repr(target))
        with Ticker() as ticker:
            started = time.monotonic()
            r = sb.run(code)
            elapsed = time.monotonic() - started
        # Before the fix: run() came back after 29 s, and no host thread ran in between (gcd held the GIL).
        assert elapsed < 10 + 15, elapsed
        print(f"{target}: run() took {elapsed:.1f} s, longest host-thread gap {ticker.longest_gap * 1000:.0f} ms")
        assert ticker.longest_gap < 3.0, f"a host thread was stopped for {ticker.longest_gap:.1f} s"
        assert r.error is None, r.error
        lines = r.stdout.splitlines()
        assert lines[0].startswith("6-Mbit ValueError") and "bits" in lines[0], r.stdout
        assert lines[1].startswith("1-Mbit ValueError") and "Fraction" in lines[1], r.stdout
        if target == "echo":  # a legitimate 8,000-bit Fraction still reaches the tool
            assert lines[2].startswith("ok accepted") and "Fraction(" in lines[2], r.stdout
        assert sb.run("print('usable')").stdout == "usable\n"


# --- 8: the host never opens a file the sandbox names ------------------------------------------------------------


_opened: list[str] = []
_watched: set[str] = set()
_hook_installed = False


def watch_opens(directory: Path) -> list[str]:
    """Paths under ``directory`` this process opens from now on (an audit hook; hooks cannot be removed)."""
    global _hook_installed
    if not _hook_installed:
        def hook(event: str, args: tuple) -> None:
            if event == "open" and _watched and any(w in str(args[0]) for w in _watched):
                _opened.append(str(args[0]))
        sys.addaudithook(hook)
        _hook_installed = True
    _watched.add(str(directory))
    return _opened


def test_zone_names_never_open_host_files(tmp_path: Path) -> None:
    from sandbox import DockerSandbox

    zone_file = tmp_path / "victim-zone"
    zone_file.write_bytes(b"TZif2" + bytes(200))
    fifo = tmp_path / "victim-fifo"
    os.mkfifo(fifo)  # opening it for reading blocks until someone writes: a host thread would hang
    opened = watch_opens(tmp_path)
    code = RAW_CALL + """
for target in TARGETS:
    pytz = {'zone': 'dateutil/' + target, 'lib': 'pytz', 'utc': 3600 * 10**6, 'name': 'X'}
    plain = {'zone': 'dateutil/' + target, 'utc': 3600 * 10**6}
    nodes = [
        {'$': 'pd.Timestamp', 'v': 0, 'unit': 'ns', 'tz': pytz},
        {'$': 'pd.Timestamp', 'v': 0, 'unit': 'ns', 'tz': plain},
        {'$': 'datetime', 'v': '2024-01-01T00:00:00', 'tz': pytz},
        {'$': 'time', 'v': '12:00:00', 'tz': plain},
        {'$': 'datetime', 'v': '2024-01-01T00:00:00', 'tz': {'zone': '../../../..' + target, 'utc': 0}},
    ]
    attempt(target[-6:], 'echo', args(*nodes))
attempt('paris', 'echo', args({'$': 'datetime', 'v': '2024-07-01T12:00:00', 'tz': {'zone': 'Europe/Paris'}}))
""".replace("TARGETS", repr([str(zone_file), str(fifo)]))
    with DockerSandbox(functions=[echo], timeout=20, function_timeout=10) as sb:
        r = sb.run(code)
    assert opened == [], f"the host opened {opened}"
    assert r.error is None, r.error
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    for line in lines[:2]:  # the tool ran (no thread blocked on the FIFO) and got the fixed offsets
        assert " accepted " in line and "Timestamp('1970-01-01 01:00:00+0100'" in line, line
    assert "ZoneInfo(key='Europe/Paris')" in lines[2], lines[2]


# --- 9: one call's JSON cannot expand in host memory ---------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRss:
    """The highest resident size of this process while the block runs.

    Read from the kernel's high-water mark (reset on entry): a thread that samples
    would not run while ``json.loads`` holds the GIL, which is when the peak happens.
    """

    def __enter__(self) -> "PeakRss":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        self.base = _status("VmRSS")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.growth = _status("VmHWM") - self.base


FLOOD = "b'[' + b'[],' * 20_000_000 + b'[]]'"  # 60 MB; json.loads made ~1.5 GB of it on the host

EXPANSIONS: dict[str, str] = {
    # Call arguments: the codec's header.
    "call": RAW_CALL + f"""
attempt('flood', 'echo', {FLOOD})
print(echo('still callable'))
""",
    # A Jupyter message the kernel sends about its own run (relayed over the attach stream).
    "jupyter": f"""
k = get_ipython().kernel
flood = {FLOOD}
original = k.session.pack
k.session.pack = lambda obj: flood if isinstance(obj, dict) and 'data' in obj else original(obj)
try:
    k.session.send(k.iopub_socket, 'display_data', {{'data': {{}}, 'metadata': {{}}}}, parent=k.get_parent('shell'),
                   ident=b'display_data')  # the topic: the relay drops the first part of an iopub message
finally:
    k.session.pack = original
print('sent')
""",
    # The file listing: the text/plain of a user expression (ast.literal_eval built ~500 bytes per byte of it).
    "listing": """
import sandbox_runtime as s
class Listing:
    def __repr__(self):
        return '[' + '[],' * 7_000_000 + '[]]'
s.list_files = lambda root='.': Listing()
print('replaced')
""",
}


@pytest.mark.parametrize("attack", sorted(EXPANSIONS))
def test_json_from_the_kernel_cannot_expand_in_host_memory(attack: str) -> None:
    from sandbox import DockerSandbox

    with DockerSandbox(functions=[echo], timeout=60, memory="2g") as sb:
        sb.run("print(echo(1))", list_files=True)
        with PeakRss() as rss:
            r = sb.run(EXPANSIONS[attack], list_files=(attack == "listing"))  # never raises
        growth = rss.growth
        print(f"{attack}: host RSS grew by {growth / 2**20:.0f} MB at most")
        # The frame itself (60 MB), its text and the scan: well under the ~1.5 GB (call, message) or
        # ~10 GB (listing) the same bytes took once parsed.
        assert growth < 400 * 2**20, f"host RSS grew by {growth / 2**20:.0f} MB"
        if attack == "call":
            assert r.error is None, r.error
            assert "flood ValueError" in r.stdout and "max_items" in r.stdout, r.stdout
            assert r.stdout.endswith("(('still callable',), {})\n"), r.stdout
        elif attack == "jupyter":  # a kernel that sends such messages is broken: it is replaced
            assert r.error is not None, r
        else:
            assert r.files is None and r.stdout == "replaced\n", r
        after = sb.run("print(echo('usable'))")
        assert "usable" in after.stdout, after
