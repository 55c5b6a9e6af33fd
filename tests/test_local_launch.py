"""The local backend's processes: started without Python between fork and exec, limited, and gone with their owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from sandbox import LocalSandbox
from sandbox._labels import process_start_time
from sandbox.local import reap_local_dirs

warnings.filterwarnings("ignore", message=".*not a security boundary.*")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_limits_reach_the_kernel_through_the_launcher() -> None:
    with LocalSandbox(memory="1g", max_file_size="5m") as sb:
        result = sb.run(textwrap.dedent("""
            import resource
            print(resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_FSIZE)[0],
                  resource.getrlimit(resource.RLIMIT_CORE)[0])
        """))
        assert result.error is None, result.error
        assert result.stdout.split() == [str(1024**3), str(5 * 1024**2), "0"]
        assert sb.run("x = bytearray(2 * 1024**3)").error.type == "MemoryError"


def test_kernel_and_supervisor_die_with_a_killed_owner(tmp_path) -> None:
    script = textwrap.dedent("""
        import os, sys, threading, time, warnings
        warnings.simplefilter("ignore")
        from sandbox import LocalSandbox
        # A busy, multi-threaded owner (like `codeact ui`): the sandbox is opened from a worker thread.
        stop = False
        def churn():
            while not stop:
                bytearray(1 << 16); [str(i) for i in range(100)]
        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        box = {}
        def open_it():
            box["sb"] = LocalSandbox().start()
        t = threading.Thread(target=open_it); t.start(); t.join(60)
        sb = box["sb"]
        r = sb.run("import os; print(os.getpid(), os.getppid())")
        kernel = int(r.stdout.split()[0])
        print(kernel, sb.process.supervisor.pid, sb.workdir, flush=True)
        time.sleep(120)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        line = owner.stdout.readline()
        assert line, "the owner did not open its sandbox"
        kernel_text, supervisor_text, workdir = line.split()
        kernel, supervisor = int(kernel_text), int(supervisor_text)
        assert os.path.isdir(workdir) and os.path.basename(workdir).startswith(f"sandbox-work-{owner.pid}-")
        assert _alive(kernel) and _alive(supervisor)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (_alive(kernel) or _alive(supervisor)):
            time.sleep(0.05)
        assert not _alive(kernel) and not _alive(supervisor)
        # Nothing of the owner is left to remove its directories: the next local sandbox (or reap) does.
        removed = reap_local_dirs(os.path.dirname(workdir))
        assert workdir in removed and not os.path.exists(workdir)
        assert any(os.path.basename(r).startswith(f"sandbox-home-{owner.pid}-") for r in removed)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@pytest.mark.parametrize("args", [["1", "0", "0", "x", "/bin/true"], ["1", "0", "0", "--"]])
def test_the_launcher_refuses_a_malformed_command_line(args: list[str]) -> None:
    from sandbox import local

    done = subprocess.run([sys.executable, "-I", "-S", local._LAUNCHER, *args], capture_output=True, timeout=30)
    assert done.returncode != 0


def test_the_launcher_does_not_run_an_orphan() -> None:
    from sandbox import local

    # The parent it names is not its parent: as if the owner had died before the parent-death signal was set.
    done = subprocess.run([sys.executable, "-I", "-S", local._LAUNCHER, "1", "0", "0", "--", "/bin/echo", "ran"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "ran" not in done.stdout


def test_reaping_removes_only_the_directories_of_processes_that_are_gone(tmp_path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me, started = os.getpid(), process_start_time(os.getpid())
    names = {
        "live": f"sandbox-work-{me}-{started}-abc",  # this process: in use
        "live-unknown-start": f"sandbox-home-{me}-0-abc",  # start time unknown when made: kept while the pid lives
        "dead": f"sandbox-work-{dead.pid}-{process_start_time(dead.pid) or 1}-abc",
        "reused-pid": f"sandbox-home-{me}-{int(started) + 1}-abc",  # the pid now names a later process
        "other": "sandbox-work-notours",
    }
    for name in names.values():
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "f").write_text("x")
    os.chmod(tmp_path / names["dead"] / "sub", 0o500)  # read-only inside: removed all the same
    removed = {os.path.basename(p) for p in reap_local_dirs(str(tmp_path))}
    assert removed == {names["dead"], names["reused-pid"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("live", "live-unknown-start", "other"))
