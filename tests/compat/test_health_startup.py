"""Start-up with NATS down (issue 48, Health; docs/operations.md, "Health").

A split fleet of its own (every service its own process) is started against a NATS server that
is not running yet: every process must stay up, answer `/healthz` 200, `/readyz` 503 naming
`nats`, and the gRPC health service NOT_SERVING. Then this test starts that NATS server, waits
until every service is ready (polling its health, which is the condition), records how long that
took after NATS accepted connections, and sends real requests: a chat completion through the
mock provider (gateway → router) and a run (gateway → executor → router, substrate).

The time to ready is a measurement, printed and kept in <logs>/health-startup.timing; it is not
asserted against a timer. Runs once, in the split step of deploy/local/test.sh.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import fleet as fleet_mod  # noqa: E402

NATS_SERVER = "/usr/sbin/nats-server"
LOGS = Path(os.environ.get("WEFT_HEALTH_LOGS", ROOT / "target" / "compat-logs" / "health"))
# Generous: a debug build on a busy 2-core machine. The figure that matters is recorded.
OVERALL = 120.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

pytestmark = pytest.mark.skipif(
    os.environ.get("WEFT_ARRANGEMENT") != "split",
    reason="starts a split fleet of its own; runs once, in the split step",
)


def _bin_dir() -> Path:
    return Path(os.environ.get("WEFT_BIN_DIR") or ROOT / "target" / "debug")


def _readyz(http: httpx.Client, base: str):
    """(status, body) of /readyz, or (None, error) when nothing answers."""
    try:
        r = http.get(f"{base}/readyz")
        return r.status_code, r.json()
    except (httpx.HTTPError, ValueError) as e:
        return None, str(e)


def _grpc_status(addr: str, service: str = ""):
    """The gRPC health status of `service` at `addr`, or None when nothing answers."""
    with grpc.insecure_channel(addr) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=3)
            return resp.status
        except grpc.RpcError:
            return None


def _until(what: str, probe, timeout: float = OVERALL):
    """Poll `probe` (every 100 ms) until it returns something truthy; its value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def _wait_accepting(port: int, proc: subprocess.Popen) -> None:
    def probe():
        assert proc.poll() is None, f"nats-server exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    _until("nats-server accepts connections", probe, 30)


def test_every_service_waits_for_nats_not_ready_then_serves(tmp_path):
    assert Path(NATS_SERVER).exists(), f"{NATS_SERVER} is missing (apt-get install nats-server)"
    LOGS.mkdir(parents=True, exist_ok=True)
    (nats_port,) = fleet_mod.free_ports(1)
    fl = fleet_mod.Fleet(_bin_dir(), arrangement="split", name="health", logs_dir=LOGS,
                         env={"WEFT_NATS__URL": f"nats://127.0.0.1:{nats_port}"},
                         ready=False, grpc=True)
    nats = None
    with fl, httpx.Client(timeout=5) as http:
        health = fl.health
        assert set(health) == set(fl.procs), (health, list(fl.procs))
        http_faces = {n: h["http"] for n, h in health.items() if h["http"]}
        grpc_faces = {n: h["grpc"] for n, h in health.items() if h["grpc"]}
        # Every service has a health face, and every gRPC server is among them.
        assert {"weft-router", "weft-substrate", "weft-mcp-bridge"} <= set(grpc_faces)
        assert {"weft-gateway", "weft-ingress", "weft-executor"} <= set(http_faces)

        # NATS is down: the services that need it stay up, and say they are not ready, naming it.
        needs_nats = {"weft-router", "weft-substrate", "weft-executor", "weft-ingress",
                      "weft-gateway", "weft-gateway-2"}
        for name, base in http_faces.items():
            status, body = _until(f"{name} answers /readyz",
                                  lambda b=base: (lambda r: r if r[0] else None)(_readyz(http, b)))
            assert status == 503, (name, status, body)
            assert body["status"] == "not_ready", (name, body)
            if name in needs_nats:
                assert body["checks"].get("nats") == "unavailable", (name, body)
                assert body["checks"].get("started") == "unavailable", (name, body)
            live = http.get(f"{base}/healthz")
            assert live.status_code == 200 and live.json() == {"status": "ok"}, (name, live.text)
        # The internal gRPC servers that need NATS answer health before they connect; the
        # gateway's public gRPC API opens once the gateway has connected.
        for name in ("weft-router", "weft-substrate"):
            status = _until(f"{name} answers gRPC health",
                            lambda a=grpc_faces[name]: _grpc_status(a))
            assert status == NOT_SERVING, (name, status)
        assert _grpc_status(grpc_faces["weft-router"], "weft.v1.Router") == NOT_SERVING
        assert _grpc_status(grpc_faces["weft-substrate"], "weft.v1.Memory") == NOT_SERVING
        # Anything else is "not yet", which clients retry: 503 with Retry-After over HTTP,
        # UNAVAILABLE over gRPC.
        r = http.post(f"{http_faces['weft-gateway']}/v1/chat/completions", json={})
        assert r.status_code == 503 and r.headers.get("retry-after") == "1", r.text
        assert r.json()["error"]["code"] == "unavailable", r.text
        with grpc.insecure_channel(grpc_faces["weft-router"]) as ch:
            call = ch.unary_unary("/weft.v1.Router/ListModels", request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as e:
                call(b"", timeout=3)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        # The MCP bridge needs no NATS: it serves.
        assert _until("weft-mcp-bridge answers gRPC health",
                      lambda: _grpc_status(grpc_faces["weft-mcp-bridge"])) == SERVING
        # After all of that, none gave up and exited.
        dead = fl.dead()
        assert not dead, f"exited while NATS was down: {dead}"

        # Start NATS; every service becomes ready on its own.
        nats_dir = tempfile.mkdtemp(prefix="weft-health-nats-", dir=tmp_path)
        nats_log = open(LOGS / "nats-server.log", "wb")
        nats = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(nats_port),
                                 "-sd", nats_dir], stdout=nats_log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_accepting(nats_port, nats)
            t0 = time.monotonic()
            ready_after: dict[str, float] = {}

            def all_ready():
                for name, base in http_faces.items():
                    if name not in ready_after and _readyz(http, base)[0] == 200:
                        ready_after[name] = time.monotonic() - t0
                for name, addr in grpc_faces.items():
                    key = f"{name} (gRPC)"
                    if key not in ready_after and _grpc_status(addr) == SERVING:
                        ready_after[key] = time.monotonic() - t0
                return len(ready_after) == len(http_faces) + len(grpc_faces)

            _until("every service ready after NATS started", all_ready)
            slowest = max(ready_after.values())
            timing = {"ready_after_nats_s": round(slowest, 2),
                      "per_service_s": {k: round(v, 2) for k, v in sorted(ready_after.items())}}
            (LOGS / "health-startup.timing").write_text(json.dumps(timing, indent=2) + "\n")
            print(f"every service ready {slowest:.2f} s after NATS accepted connections: "
                  f"{timing['per_service_s']}", file=sys.stderr)

            # Real work: a chat completion through the mock provider, and a run.
            auth = {"authorization": f"Bearer {fl.token}"}
            r = http.post(f"{fl.url}/v1/chat/completions", headers=auth, timeout=30,
                          json={"model": "default", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"], r.text
            agent = f"health-{uuid.uuid4().hex[:8]}"
            r = http.put(f"{fl.url}/v1/agents/{agent}", headers=auth, json={"model": "mock-1"})
            assert r.status_code == 201, r.text
            r = http.post(f"{fl.url}/v1/runs", headers=auth,
                          json={"agent": agent, "input": "hello"})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]

            def finished():
                run = http.get(f"{fl.url}/v1/runs/{run_id}", headers=auth).json()
                return run if run["status"] in ("succeeded", "failed", "cancelled") else None
            run = _until("the run finishes", finished, 60)
            assert run["status"] == "succeeded", run
        finally:
            stopped = fl.stop()
            nats.send_signal(signal.SIGTERM)
            try:
                nats.wait(15)
            except subprocess.TimeoutExpired:
                nats.kill()
                nats.wait()
            nats_log.close()
        assert stopped, f"a process did not stop cleanly: {fl.failures}"


def test_a_service_waiting_for_nats_exits_cleanly_on_sigterm(tmp_path):
    LOGS.mkdir(parents=True, exist_ok=True)
    nats_port, port = fleet_mod.free_ports(2)
    proc = fleet_mod.Proc("weft-router (waiting)", [
        _bin_dir() / "weft-router", "--listen", f"127.0.0.1:{port}"], LOGS / "router-waiting.log",
        {"WEFT_NATS__URL": f"nats://127.0.0.1:{nats_port}",
         "WEFT_AUTH__INTERNAL_JWT_SECRET": "x" * 64,
         "WEFT_NATS__PREFIX": "health" + uuid.uuid4().hex[:8]})
    try:
        status = _until("the waiting router answers gRPC health",
                        lambda: _grpc_status(f"127.0.0.1:{port}"), 60)
        assert status == NOT_SERVING
        assert proc.alive()
    finally:
        code = proc.stop()
    assert code == 0, f"exit status {code} (log: {proc.log})"
