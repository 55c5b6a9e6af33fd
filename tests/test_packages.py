"""Packages without Docker: requirement parsing, the policy, safe wheel unpacking, the host's pip and cache,
the in-sandbox ``pip install`` parsing, and the local backend end to end.

The resolver tests use the real registry through the host's pip (no fakes);
the Docker side is in ``test_packages_docker.py``.
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from sandbox._pkg_cache import PackageCache, sha256_of
from sandbox._pkg_pip import Target
from sandbox._pkg_wheel import WheelError, extract_tar, prefixed_tar, wheel_to_tar
from sandbox.errors import PackageInstallError
from sandbox.packages import (
    PackageInstaller,
    PackagePolicy,
    canonical_name,
    parse_requirements,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sandbox" / "runtime"))
import sandbox_runtime

pytestmark = pytest.mark.timeout(300)

TARGET = Target.manylinux("3.11", "x86_64", (2, 36))


def make_wheel(directory: Path, name: str = "demo_pkg", version: str = "1.0", files: dict[str, bytes] | None = None,
               extra: list[tuple[zipfile.ZipInfo, bytes]] = ()) -> Path:
    """A small, valid pure-Python wheel (what a build backend would write), for offline and safety tests."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = files if files is not None else {f"{name}/__init__.py": f"VALUE = {version!r}\n".encode()}
    with zipfile.ZipFile(path, "w") as z:
        for arcname, data in files.items():
            z.writestr(arcname, data)
        for info, data in extra:
            z.writestr(info, data)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


# --------------------------------------------------------------------------- requirements and policy


def test_requirements_are_canonicalised_and_anything_else_refused() -> None:
    assert parse_requirements(["Scikit_Learn>=1.3", "pandas[Excel]", "numpy <3, >=2", "six===1.16.0"]) == [
        ("scikit-learn>=1.3", "scikit-learn"), ("pandas[excel]", "pandas"), ("numpy<3,>=2", "numpy"),
        ("six===1.16.0", "six")]
    for bad in ["--index-url=http://evil/simple", "-r /etc/passwd", "-r reqs.txt", "pkg @ https://example.com/x.whl",
                "./local/dir", "git+https://github.com/x/y", "a\nb", "six\n", "", "x" * 300, 42, "not a req!",
                "numpy ; python_version>='3'", "six; os_name == 'posix'", "six===${HOME}", "six==$HOME",
                "six===%PATH%", "${PIP_INDEX_URL}", "six===a b", "six===", "ｓix", "six\u037e", "six\u2264 2",
                "six==1.0\x00", "six --index-url x", "six==1.0 --hash=sha256:00"]:
        with pytest.raises(PackageInstallError) as info:
            parse_requirements([bad])
        assert info.value.kind == "invalid", bad
        if isinstance(bad, str) and any(c in bad for c in "$%\n"):  # text outside the grammar is not echoed
            assert bad.strip() not in str(info.value), bad
    with pytest.raises(PackageInstallError, match="at most 64"):
        parse_requirements(["x"] * 65)


def test_the_resolver_refuses_text_that_did_not_come_from_the_grammar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second line behind parse_requirements: what could be expanded never reaches pip."""
    from sandbox import _pkg_pip as pip

    secret = "codeact-test-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("CODEACT_TEST_SECRET_TOKEN", secret)
    for requirements, constraints in ([["six===${CODEACT_TEST_SECRET_TOKEN}"], []], [["six"], ["numpy==${X}"]],
                                      [["six ; os_name=='nt'"], []], [["six"], ["numpy==2.0.*"]]):
        with pytest.raises(pip.PipFailure) as info:
            pip.resolve(requirements, constraints, TARGET, pip.Sources())
        assert info.value.kind == "internal" and secret not in str(info.value)


def test_pip_runs_with_what_it_needs_and_no_secrets() -> None:
    from sandbox._pkg_pip import pip_environment

    host = {"PATH": "/usr/bin", "HOME": "/home/u", "https_proxy": "http://proxy:3128", "NO_PROXY": "localhost",
            "REQUESTS_CA_BUNDLE": "/etc/ssl/ca.pem", "SSL_CERT_FILE": "/etc/ssl/c.pem", "PIP_INDEX_URL": "https://m/s",
            "PIP_CONFIG_FILE": "/etc/pip.conf", "OPENAI_API_KEY": "sk-1", "GITHUB_TOKEN": "t",
            "AWS_SECRET_ACCESS_KEY": "s",
            "PIP_AUTH_TOKEN": "t2", "DATABASE_URL": "postgres://u:p@h/db", "LD_PRELOAD": "/tmp/x.so",
            "PYTHONPATH": "/tmp/evil"}
    env = pip_environment(host)
    for kept in ("PATH", "HOME", "https_proxy", "NO_PROXY", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "PIP_INDEX_URL",
                 "PIP_CONFIG_FILE"):
        assert env[kept] == host[kept], kept
    for dropped in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "PIP_AUTH_TOKEN", "DATABASE_URL",
                    "LD_PRELOAD", "PYTHONPATH"):
        assert dropped not in env, dropped
    assert env["PIP_NO_INPUT"] == "1"


def test_pip_output_never_becomes_the_message(caplog: pytest.LogCaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox import _pkg_pip as pip

    secret = "codeact-test-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("CODEACT_TEST_SECRET_TOKEN", secret)
    sources = pip.Sources(index_url=f"https://user:{secret}@mirror.example/simple")
    outputs = [f"ERROR: Something odd happened with {secret}\n",
               f"ERROR: Could not find a version that satisfies the requirement six==={secret} (from versions: none)\n",
               f"ERROR: Could not find a version that satisfies the requirement six (from versions: 1.0, {secret})\n",
               "ERROR: Cannot install six because these package versions have conflicting dependencies.\n"
               f"The conflict is caused by:\n    The user requested six=={secret}\n    foo 1.0 depends on {secret}\n"
               "ResolutionImpossible\n",
               "Max retries exceeded with url: /simple/six/\n"]
    with caplog.at_level("WARNING", logger="sandbox.packages"):
        for output in outputs:
            failure = pip.classify(output, TARGET, sources, requirements=["six"])
            assert secret not in str(failure) and secret not in " ".join(failure.details), output
    assert caplog.records and all(secret not in r.getMessage() for r in caplog.records)
    assert sources.describe() == "https://***@mirror.example/simple"


def test_policy_rules_name_the_rule_and_deny_wins() -> None:
    policy = PackagePolicy(allow=("scikit-*", "numpy", "scipy"), deny=("scikit-image",))
    assert policy.refusal("Scikit_Learn") is None and policy.refusal("numpy") is None
    assert "deny rule 'scikit-image'" in (policy.refusal("scikit-image") or "")
    assert "not on the allow list" in (policy.refusal("pandas") or "")
    assert PackagePolicy(deny="torch*, tensorflow").deny == ("torch*", "tensorflow")
    with pytest.raises(PackageInstallError, match="needs wheelhouse"):
        PackagePolicy(offline=True)
    with pytest.raises(PackageInstallError, match="not a directory"):
        PackagePolicy(wheelhouse="/nonexistent/wheels")


def test_manylinux_target_covers_older_glibc_tags() -> None:
    tags = TARGET.platforms
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_37_x86_64" not in tags
    args = TARGET.pip_args()
    assert args[:4] == ["--python-version", "3.11", "--implementation", "cp"] and "cp311" in args


# --------------------------------------------------------------------------- wheels


def test_wheel_unpacks_to_root_owned_tar_with_data_dirs_mapped(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, files={
        "demo_pkg/__init__.py": b"X = 1\n",
        "demo_pkg-1.0.data/purelib/demo_extra.py": b"Y = 2\n",
        "demo_pkg-1.0.data/scripts/demo-cli": b"#!/bin/sh\n",
        "demo_pkg-1.0.data/data/share/x.txt": b"data\n",
    })
    buf = io.BytesIO()
    installed = wheel_to_tar(wheel, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "demo_pkg/__init__.py" in members and "demo_extra.py" in members
    assert not any("scripts" in n or "share" in n for n in members)
    assert "demo_pkg-1.0.dist-info/INSTALLER" in members
    assert all(m.uid == 0 and not (m.mode & 0o022) for m in members.values())
    assert installed == len(b"X = 1\n") + len(b"Y = 2\n") + len(
        b"Metadata-Version: 2.1\nName: demo_pkg\nVersion: 1.0\n") + len(
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")


@pytest.mark.parametrize("entry", ["../evil.py", "/etc/evil.py", "demo_pkg/../../evil.py", "demo_pkg\\evil.py",
                                   "demo_pkg/a\nb.py", "demo_pkg/."])
def test_wheel_with_an_unsafe_entry_is_refused(tmp_path: Path, entry: str) -> None:
    wheel = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo_pkg-1.0.dist-info/METADATA", "Name: demo_pkg\n")
        z.writestr(zipfile.ZipInfo(entry), b"boom")
    with pytest.raises(WheelError, match="unsafe entry"):
        wheel_to_tar(wheel, io.BytesIO())


def test_wheel_with_a_symlink_is_refused(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("demo_pkg/link")
    link.external_attr = (0o120777 << 16)
    wheel = make_wheel(tmp_path, extra=[(link, b"/etc/passwd")])
    with pytest.raises(WheelError, match="not a regular file"):
        wheel_to_tar(wheel, io.BytesIO())


def test_bundle_puts_long_names_under_the_prefix(tmp_path: Path) -> None:
    long_name = "demo_pkg/" + "/".join(["d" * 40] * 4) + "/module_with_a_long_name.cpython-311-x86_64-linux-gnu.so"
    wheel = make_wheel(tmp_path, files={long_name: b"\x7fELF", "demo_pkg/__init__.py": b""})
    part = tmp_path / "part.tar"
    with part.open("wb") as f:
        wheel_to_tar(wheel, f)
    bundle = tmp_path / "bundle.tar"
    with bundle.open("wb") as f:
        prefixed_tar([part], "abc123", f)
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert names[0] == "abc123" and all(n == "abc123" or n.startswith("abc123/") for n in names)
    assert f"abc123/{long_name}" in names
    extract_tar(part, tmp_path / "site")
    assert (tmp_path / "site" / long_name).read_bytes() == b"\x7fELF"


# --------------------------------------------------------------------------- the host's pip and cache (real registry)


def test_resolve_fetch_and_cache_for_the_sandbox_platform(tmp_path: Path) -> None:
    installer = PackageInstaller(PackagePolicy(cache_dir=str(tmp_path / "cache")), TARGET)
    plan = installer.plan(["msgpack", "tabulate"], present={})
    names = {canonical_name(w.pick.name) for w in plan.wheels}
    assert names == {"msgpack", "tabulate"} and not plan.resolved_from_cache and plan.downloaded == 2
    msgpack = next(w for w in plan.wheels if w.pick.name == "msgpack")
    assert "cp311" in msgpack.path.name and "manylinux" in msgpack.path.name  # the sandbox's, not the host's
    for w in plan.wheels:  # content-addressed: the directory is the file's hash
        assert w.path.parent.name == w.sha256 == sha256_of(w.path)
    again = installer.plan(["msgpack", "tabulate"], present={})
    assert again.resolved_from_cache and again.downloaded == 0
    assert [w.path for w in again.wheels] == [w.path for w in plan.wheels]


def test_present_packages_are_constraints_and_not_installed_again(tmp_path: Path) -> None:
    installer = PackageInstaller(PackagePolicy(cache_dir=str(tmp_path / "cache")), TARGET)
    plan = installer.plan(["pandas"], present={"pandas": "3.1.1", "numpy": "2.4.6"})
    new = {canonical_name(w.pick.name) for w in plan.wheels}
    assert "python-dateutil" in new and not new & {"pandas", "numpy"}  # what is there stays, the rest comes
    assert ("pandas", "3.1.1") in plan.present and ("numpy", "2.4.6") in plan.present
    with pytest.raises(PackageInstallError) as info:
        installer.plan(["numpy<2"], present={"numpy": "2.4.6"})
    assert info.value.kind == "conflict"
    assert "numpy<2" in str(info.value) and any("numpy 2.4.6 is already installed" in d for d in info.value.details)


def test_exact_pins_already_there_need_no_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a restore asks of a session made with the snapshot's packages: every pin is there already.
    from sandbox import _pkg_pip as pip

    installer = PackageInstaller(PackagePolicy(cache_dir=str(tmp_path / "cache")), TARGET)
    calls: list[tuple[str, ...]] = []
    real = pip.resolve
    monkeypatch.setattr(pip, "resolve", lambda texts, *a, **k: calls.append(tuple(texts)) or real(texts, *a, **k))
    present = {"tabulate": "0.9.0", "six": "1.17.0"}
    plan = installer.plan(["Tabulate==0.9.0", "six==1.17.0"], present=present)
    assert plan.wheels == [] and sorted(plan.present) == [("six", "1.17.0"), ("tabulate", "0.9.0")]
    assert calls == []
    # A pin of another version, a range or a package not there still asks the resolver (and fails as it says).
    with pytest.raises(PackageInstallError) as info:
        installer.plan(["tabulate==0.8.10"], present=present)
    assert info.value.kind == "conflict" and calls == [("tabulate==0.8.10",)]
    assert installer.plan(["six>=1"], present=present).wheels == [] and calls[-1] == ("six>=1",)
    with pytest.raises(PackageInstallError, match="refused by the host's package policy"):  # the policy first
        PackageInstaller(PackagePolicy(deny=["six"], cache_dir=str(tmp_path / "cache")), TARGET).plan(
            ["six==1.17.0"], present=present)


@pytest.mark.parametrize("request_, kind, words", [
    ("docopt", "no_wheel", "only a source distribution"),
    ("codeact-no-such-package-zq81x", "not_found", "no package named"),
    ("pandas<1", "not_found", "no version of pandas"),
])
def test_errors_name_the_cause(tmp_path: Path, request_: str, kind: str, words: str) -> None:
    installer = PackageInstaller(PackagePolicy(cache_dir=str(tmp_path / "cache")), TARGET)
    with pytest.raises(PackageInstallError) as info:
        installer.plan([request_], present={})
    assert info.value.kind == kind and words in str(info.value)


def test_policy_applies_to_dependencies_and_size(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    deny_dep = PackageInstaller(PackagePolicy(deny=("threadpoolctl",), cache_dir=cache), TARGET)
    with pytest.raises(PackageInstallError) as info:
        deny_dep.plan(["scikit-learn"], present={"numpy": "2.4.6"})
    assert info.value.kind == "policy" and "threadpoolctl matches the deny rule" in str(info.value)
    assert not list(Path(cache).rglob("*.whl"))  # refused before anything was downloaded


def cache_files(root: Path) -> dict[str, int]:
    """Every file of a package cache with its size, lock files apart (empty, and made by looking)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and p.parent.name != "locks"} if root.exists() else {}


def test_approval_is_asked_before_anything_is_downloaded(tmp_path: Path) -> None:
    asked = []
    cache = tmp_path / "cache"

    def approve(request) -> bool:
        asked.append(request)
        assert not list(cache.rglob("*.whl"))  # the question comes first
        return False

    installer = PackageInstaller(PackagePolicy(approve=approve, cache_dir=str(cache)), TARGET)
    with pytest.raises(PackageInstallError) as info:
        installer.plan(["tabulate", "six"], present={}, source="runtime")
    assert info.value.kind == "denied"
    assert cache_files(cache) == {}  # refused: nothing downloaded, not even the resolution kept
    request = asked[0]
    assert request.requirements == ("tabulate", "six") and {p.name for p in request.packages} == {"tabulate", "six"}
    assert all(p.version and p.size and p.size > 1000 for p in request.packages)  # sizes from the index
    assert request.download_bytes == request.wheel_bytes == sum(p.size for p in request.packages)
    assert "tabulate" in request.summary() and "MB of wheels" in request.summary()
    installer.plan(["tabulate"], present={}, source="upfront")  # the host's own list is not asked about
    assert len(asked) == 1 and list(cache.rglob("tabulate-*.whl"))


def test_over_the_cap_is_refused_before_download(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    small = PackageInstaller(PackagePolicy(max_total_bytes=100_000, cache_dir=str(cache)), TARGET)
    with pytest.raises(PackageInstallError) as info:
        small.plan(["msgpack"], present={})
    assert info.value.kind == "too_large" and "0.1 MB in all" in str(info.value)
    assert "nothing was downloaded" in str(info.value) and cache_files(cache) == {}
    with pytest.raises(PackageInstallError) as info:  # what the session already added counts
        PackageInstaller(PackagePolicy(max_total_bytes=5_000_000, cache_dir=str(cache)), TARGET).plan(
            ["six"], present={}, installed_so_far=4_999_000)
    assert info.value.kind == "too_large" and "has used 5.0 MB" in str(info.value) and cache_files(cache) == {}


def test_offline_wheelhouse_needs_no_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "demo_pkg", "1.0")
    make_wheel(wheelhouse, "demo_pkg", "2.0")
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: every fetch fails
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "3")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no machine-wide mirror or local index either
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    cache = str(tmp_path / "cache")
    online = PackageInstaller(PackagePolicy(cache_dir=cache), TARGET)
    with pytest.raises(PackageInstallError) as info:
        online.plan(["tabulate"], present={})
    assert info.value.kind == "unreachable"  # proves the network is really blocked for pip
    offline = PackageInstaller(PackagePolicy(wheelhouse=str(wheelhouse), offline=True, cache_dir=cache), TARGET)
    plan = offline.plan(["demo-pkg"], present={})
    assert [(w.pick.name, w.pick.version) for w in plan.wheels] == [("demo_pkg", "2.0")]
    with pytest.raises(PackageInstallError) as info:
        offline.plan(["tabulate"], present={})
    assert info.value.kind == "not_found" and "wheelhouse" in str(info.value)


def test_cache_survives_concurrent_fetches(tmp_path: Path) -> None:
    import threading

    cache = PackageCache(tmp_path / "cache")
    results, errors = [], []

    def one() -> None:
        try:
            installer = PackageInstaller(PackagePolicy(cache_dir=str(cache.root), resolution_max_age=0), TARGET)
            results.append(installer.plan(["msgpack"], present={}))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    wheels = list((cache.root / "wheels").glob("*/*.whl"))
    assert len(wheels) == 1 and wheels[0].parent.name == sha256_of(wheels[0])
    assert sum(r.downloaded for r in results) == 1  # the others waited for it
    assert not list((cache.root / "tmp").glob("*")) and not list((cache.root / "unpacked").glob(".tmp-*"))


# --------------------------------------------------------------------------- in the sandbox: pip lines


@pytest.mark.parametrize("command, words", [
    ("pip install scikit-learn", ["scikit-learn"]),
    ("pip3 install -q 'statsmodels>=0.14' seaborn", ["-q", "statsmodels>=0.14", "seaborn"]),
    ("python -m pip install -U openpyxl", ["-U", "openpyxl"]),
    ("/usr/bin/python3 -m pip install pyarrow > /dev/null 2>&1", ["pyarrow"]),
    ("pip list", None),
    ("pip install x && rm -rf /", None),
    ("ls -la", None),
])
def test_pip_install_lines_are_recognised(command: str, words: list[str] | None) -> None:
    assert sandbox_runtime._pip_words(command) == words


def test_pip_install_arguments(tmp_path: Path) -> None:
    reqs = tmp_path / "req.txt"
    reqs.write_text("# comment\nseaborn>=0.13\n--index-url http://x\n\nopenpyxl  # excel\n")
    assert sandbox_runtime._pip_install_arguments(
        ["-q", "--upgrade", "--progress-bar", "off", "tabulate", "-r", str(reqs)]) == (
        ["tabulate", "seaborn>=0.13", "openpyxl"], True)
    for refused in (["-i", "http://evil/simple", "x"], ["--extra-index-url=http://evil", "x"], ["-e", "."]):
        with pytest.raises(sandbox_runtime.PackageInstallError) as info:
            sandbox_runtime._pip_install_arguments(refused)
        assert info.value.kind == "policy"


# --------------------------------------------------------------------------- the local backend, end to end


def test_local_backend_installs_up_front_and_at_run_time(tmp_path: Path) -> None:
    import warnings

    from sandbox import LocalSandbox

    # Wheels no host environment has (the host venv's own packages count as installed for this backend).
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "codeact_upfront_demo", "1.0")
    make_wheel(wheelhouse, "codeact_runtime_demo", "2.0")
    policy = PackagePolicy(cache_dir=str(tmp_path / "cache"), wheelhouse=str(wheelhouse), offline=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb = LocalSandbox(packages=["codeact-upfront-demo"], package_policy=policy)
    with sb:
        r = sb.run("import codeact_upfront_demo as u; print(u.VALUE)\n"
                   "install('codeact-runtime-demo')\nimport codeact_runtime_demo as d\nprint(d.VALUE)")
        assert r.error is None, r.error
        assert "Installed codeact_runtime_demo 2.0" in r.stdout and "'1.0'" not in r.stdout
        assert r.stdout.splitlines()[0] == "1.0" and r.stdout.splitlines()[-1] == "2.0"
        env_path, batch = sb.packages.sandbox_paths()
        assert env_path.startswith(str(tmp_path / "cache" / "envs")) and os.path.isdir(batch)
        sb.restart()  # a new kernel finds both again
        r = sb.run("import codeact_upfront_demo, codeact_runtime_demo; print('ok')")
        assert r.stdout.strip() == "ok", r.error
        assert [rec.source for rec in sb.packages.records] == ["upfront", "runtime"]
    assert not os.path.exists(batch)  # the session's own installs go with it


# --------------------------------------------------------------------------- the cache's bounds


def _fill_cache(root: Path, n: int, size: int = 100_000) -> tuple[PackageCache, list[str]]:
    """A cache holding ``n`` wheels of ``size`` bytes, each with its unpacked form; used an hour apart, oldest first."""
    import json
    import time

    cache = PackageCache(root)
    shas = []
    for i in range(n):
        sha = f"{i:064x}"
        wheel = root / "wheels" / sha / f"pkg{i}-1.0-py3-none-any.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_bytes(b"w" * size)
        (root / "unpacked").mkdir(exist_ok=True)
        (root / "unpacked" / f"{sha}.tar").write_bytes(b"t" * size)
        (root / "unpacked" / f"{sha}.json").write_text(json.dumps({"installed_bytes": size}))
        used = time.time() - 3600 * (n - i + 1)
        for path in (wheel, root / "unpacked" / f"{sha}.tar", root / "unpacked" / f"{sha}.json"):
            os.utime(path, (used, used))
        shas.append(sha)
    return cache, shas


def _wheels_left(root: Path) -> list[str]:
    return sorted(d.name for d in (root / "wheels").iterdir())


def test_cache_evicts_least_recently_used_wheels_down_to_its_size(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _, shas = _fill_cache(root, 5)
    os.utime(root / "wheels" / shas[0] / "pkg0-1.0-py3-none-any.whl")  # the oldest was used just now
    bounded = PackageCache(root, max_bytes=650_000, max_age=None)
    assert bounded.size() > 1_000_000
    removed = bounded.evict()
    assert removed == [f"wheel:{shas[1]}", f"wheel:{shas[2]}"]  # least recently used first, until it fits
    assert _wheels_left(root) == sorted([shas[0], shas[3], shas[4]]) and bounded.size() <= 650_000
    assert not (root / "unpacked" / f"{shas[1]}.tar").exists()  # a wheel goes with its unpacked form


def test_files_a_killed_writer_left_in_the_cache_are_removed_once_stale(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _fill_cache(root, 1)
    (root / "bytecode").mkdir()
    stale = [root / "bytecode" / ".tmp-half", root / "bundles" / ".tmp-half", root / ".tmp-top"]
    fresh = root / "bytecode" / ".tmp-now"  # a writer at work
    for path in [*stale, fresh]:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 1000)
    for path in stale:
        os.utime(path, (time.time() - 2 * 3600,) * 2)
    PackageCache(root, max_bytes=None, max_age=None).evict()  # even a cache without bounds
    assert [p for p in stale if p.exists()] == [] and fresh.exists()
    assert _wheels_left(root)  # the entries stay


def test_cache_evicts_by_age_and_never_what_a_live_session_holds(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _, shas = _fill_cache(root, 4)
    lease = PackageCache(root).lease()
    lease.add(wheels=[shas[0]])  # a live session of this process uses the oldest
    aged = PackageCache(root, max_bytes=None, max_age=2.5 * 3600)
    assert aged.evict() == [f"wheel:{shas[1]}", f"wheel:{shas[2]}"]
    assert _wheels_left(root) == sorted([shas[0], shas[3]])
    lease.close()  # the session ended
    assert aged.evict() == [f"wheel:{shas[0]}"]


def test_a_dead_sessions_lease_is_dropped(tmp_path: Path) -> None:
    import subprocess

    root = tmp_path / "cache"
    _, shas = _fill_cache(root, 2)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from sandbox._pkg_cache import PackageCache\n"
            "lease = PackageCache(sys.argv[2]).lease(); lease.add(wheels=[sys.argv[3]])\n"
            "os._exit(0)")  # dies holding it
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent.parent), str(root), shas[0]],
                   check=True)
    assert len(list((root / "leases").glob("*.json"))) == 1
    removed = PackageCache(root, max_bytes=0, max_age=None).evict()
    assert set(removed) == {f"wheel:{shas[0]}", f"wheel:{shas[1]}"} and not list((root / "leases").glob("*"))


def test_a_session_holds_what_it_installed(tmp_path: Path) -> None:
    """A local session's up-front set survives an eviction that would take it; after close() it may go."""
    import warnings

    from sandbox import LocalSandbox

    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "codeact_held_demo", "1.0")
    root = tmp_path / "cache"
    policy = PackagePolicy(cache_dir=str(root), wheelhouse=str(wheelhouse), offline=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb = LocalSandbox(packages=["codeact-held-demo"], package_policy=policy)
    with sb:
        assert sb.run("import codeact_held_demo as d; print(d.VALUE)").stdout.strip() == "1.0"
        later = 10 * 24 * 3600 + __import__("time").time()  # long after: everything is old
        strict = PackageCache(root, max_bytes=0, max_age=1)
        removed = strict.evict(now=later)
        assert not any(r.startswith(("wheel:", "env:")) for r in removed), removed
        assert list((root / "wheels").glob("*/*.whl")) and list((root / "envs").iterdir())
        sb.packages.close()
        assert {r.split(":")[0] for r in strict.evict(now=later)} >= {"wheel", "env"}


# --------------------------------------------------------------------------- the oldest pip we support


@pytest.mark.parametrize("pip_version", ["bundled", "22.2"])
def test_resolver_works_with_an_old_pip_in_a_fresh_venv(tmp_path: Path, pip_version: str) -> None:
    """A venv made with `python3 -m venv` has the pip its Python bundles (23.2 for 3.11), which refuses platform
    options without --target; 22.2 is the oldest pip with --report. The resolver module runs there as it is."""
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "ensurepip"], check=True, capture_output=True)  # the pip this Python ships
    if pip_version != "bundled":
        subprocess.run([python, "-m", "pip", "install", "-q", f"pip=={pip_version}"], check=True, capture_output=True)
    shown = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, check=True).stdout
    assert shown.startswith("pip " + ("23." if pip_version == "bundled" else pip_version))
    # Only the stdlib-only resolver and cache modules, from this checkout: the venv has nothing else.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from sandbox._pkg_pip import Target, Sources, resolve\n"
        "from sandbox._pkg_cache import PackageCache\n"
        "target = Target.manylinux('3.11', 'x86_64', (2, 36))\n"
        "picks = resolve(['msgpack', 'six'], [], target, Sources())\n"
        "wheels, n = PackageCache(sys.argv[2]).fetch(picks, target, Sources())\n"
        "print(sorted((w.pick.name, w.path.name, w.size == w.pick.size) for w in wheels), n)\n"
    )
    done = subprocess.run([python, "-c", code, str(Path(__file__).resolve().parent.parent), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "('msgpack', 'msgpack-" in done.stdout and "cp311" in done.stdout and "manylinux" in done.stdout
    assert "('six', 'six-" in done.stdout and "True), ('six'" in done.stdout and done.stdout.strip().endswith(" 2")
