"""`mcp`: `echo` tool calls on a local MCP server, directly and through `weft-mcp-bridge` (gRPC
`CallTool` with the internal JWT, as the executor calls it), at each concurrency, with the CPU
per call of the bridge, the server and weft; optionally the profiling targets that take the
bridge apart (`pool`, `bridge-hop`, `bridge-in-process`; `pool` and `bridge-in-process` link the
bridge into the generator, so they are `weft-mcp-profile`'s, loadtest/mcp-profile)."""

import secrets
import socket
import time

from ..common import (BenchError, Machine, compiler_running, get, int_list, loadavg, log,
                      proc_ticks, HZ, table, word_list)

HELP = "MCP tool calls directly vs through the MCP bridge"
DURATION = "10s"
BINARIES = ["weft", "weft-mcp-bridge"]
EXTRA = ["pool", "bridge-hop", "bridge-in-process"]
# The targets run by `weft-mcp-profile` (the bridge in the generator's process), not weft-loadtest.
IN_PROCESS = ["pool", "bridge-in-process"]


def binaries(args):
    return BINARIES + (["weft-mcp-profile"] if set(args.extra_targets) & set(IN_PROCESS) else [])


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[1, 8], help="default 1,8")
    p.add_argument("--repeat", type=int, default=1, help="direct/bridge pairs per level")
    p.add_argument("--extra-targets", type=word_list, default=[],
                   help=f"profiling runs after each pair: some of {','.join(EXTRA)}")
    p.add_argument("--server-threads", type=int, default=1)


def config(secret):
    return f"""
[router.providers.mock]
kind = "mock"

[router.providers.mock.models.mock-1]

[auth]
internal_jwt_secret = "{secret}"

[telemetry]
log_level = "warn"
"""


def run(s):
    a = s.args
    bad = [t for t in a.extra_targets if t not in EXTRA]
    if bad:
        raise BenchError(f"unknown --extra-targets {bad}; choose from {EXTRA}")
    # The fleet's internal JWT secret, shared by weft, the bridge and the generator (which
    # signs the executor's tokens). Fixed per sitting, never the developer's own.
    secret = "mcp-bench-" + secrets.token_hex(24)
    server = s.serve("server", "mcp-server", "--threads", a.server_threads)
    server_url = server.ready["url"]
    fleet = s.fleet(config(secret))
    substrate = s.substrate_url(fleet)
    weft_pids = s.server_pids(fleet)
    s.api(fleet, "PUT", "/v1/mcp-servers/bench", {"url": server_url,
                                                  "description": "mcp-bench echo server"})
    from fleet import free_ports
    (bport,) = free_ports(1)
    # Its own process, as deployed; a tenant-defined server on 127.0.0.1 is refused unless
    # exempted (figment parses the env value as an array).
    bridge = s.spawn("bridge", [s.bin / "weft-mcp-bridge", "--listen", f"127.0.0.1:{bport}",
                                "--substrate-url", substrate],
                     env={"WEFT_AUTH__INTERNAL_JWT_SECRET": secret,
                          "WEFT_MCP_BRIDGE__PRIVATE_EXEMPT": '["127.0.0.1/32"]',
                          "WEFT_TELEMETRY__LOG_LEVEL": "warn"})

    def listening():
        try:
            socket.create_connection(("127.0.0.1", bport), timeout=0.5).close()
            return True
        except OSError:
            return False
    s.wait_until("weft-mcp-bridge", listening, bridge, 30)
    bridge_url = f"http://127.0.0.1:{bport}"
    log(f"MCP server at {server_url}, weft at {fleet.url}, bridge at {bridge_url}")
    env = {"WEFT_LOADTEST_JWT_SECRET": secret}

    def one(target, c, i):
        out = s.out / f"{target}-c{c}-{i}.json"
        args = {"direct": ["--url", server_url], "pool": ["--url", server_url],
                "bridge": ["--bridge-url", bridge_url, "--server", "bench", "--tenant", "default"],
                "bridge-hop": ["--bridge-url", bridge_url, "--server", "bench", "--tenant", "default"],
                "bridge-in-process": ["--substrate-url", substrate, "--server", "bench",
                                      "--tenant", "default"]}[target]
        load, rustc = " ".join(loadavg()), compiler_running()
        m0 = Machine()
        b0, s0, w0 = proc_ticks(bridge.pid), proc_ticks(server.pid), sum(map(proc_ticks, weft_pids))
        exe = s.bin / "weft-mcp-profile" if target in IN_PROCESS else None
        r = s.loadtest("mcp", "--target", target, *args, "--concurrency", c, "--duration",
                       a.duration, "--warmup", a.warmup, "--threads", a.gen_threads, out=out, env=env,
                       exe=exe)
        b, sv, w = (proc_ticks(bridge.pid) - b0, proc_ticks(server.pid) - s0,
                    sum(map(proc_ticks, weft_pids)) - w0)
        mm = Machine.since(m0)
        calls = r["calls_incl_warmup"]
        per = lambda t: round(t * 1e6 / HZ / calls, 1) if calls else None
        r.update(pair=i, bridge_cpu_ms=b * 1000 / HZ, server_cpu_ms=sv * 1000 / HZ,
                 weft_cpu_ms=w * 1000 / HZ, bridge_cpu_us_per_call=per(b),
                 server_cpu_us_per_call=per(sv), weft_cpu_us_per_call=per(w),
                 machine_busy_cores=mm["busy_cores"], loadavg_before=load, compiler_running=rustc)
        s.write_json(out.name, r)
        log(f"{target} c={c} #{i}: {r['calls_per_s']} calls/s, p50 {get(r, 'latency_us.p50')} µs, "
            f"p99 {get(r, 'latency_us.p99')} µs, errors {r['errors']}, bridge CPU "
            f"{r['bridge_cpu_us_per_call']} µs/call")
        time.sleep(1)
        return r

    rows, extra_rows, figures = [], [], {}
    msf = lambda us: "n/a" if us is None else f"{round(us / 1000, 3):g}"
    for c in a.concurrency:
        for i in range(1, a.repeat + 1):
            d, b = one("direct", c, i), one("bridge", c, i)
            extras = {t: one(t, c, i) for t in a.extra_targets}
            dl, bl = d.get("latency_us"), b.get("latency_us")
            added = ({q: bl[q] - dl[q] for q in ("p50", "p90", "p99", "mean")} if dl and bl else None)
            s.write_json(f"compare-c{c}-{i}.json", {
                "concurrency": c, "pair": i, "direct_latency_us": dl, "bridge_latency_us": bl,
                "added_latency_us": added, "direct_calls_per_s": d["calls_per_s"],
                "bridge_calls_per_s": b["calls_per_s"],
                "bridge_cpu_us_per_call": b["bridge_cpu_us_per_call"],
                "errors": {"direct": d["errors"], "bridge": b["errors"]}})
            rows.append([c, i, d["calls_per_s"], msf(get(d, "latency_us.p50")),
                         msf(get(d, "latency_us.p99")), b["calls_per_s"],
                         msf(get(b, "latency_us.p50")), msf(get(b, "latency_us.p99")),
                         msf(added and added["p50"]), msf(added and added["p99"]),
                         b["bridge_cpu_us_per_call"],
                         f"{d['server_cpu_us_per_call']} / {b['server_cpu_us_per_call']}",
                         b["weft_cpu_us_per_call"], f"{d['errors']} / {b['errors']}",
                         f"{d['loadavg_before']} / {b['loadavg_before']}"])
            k = f"c{c}" + (f"#{i}" if a.repeat > 1 else "")
            figures.update({f"{k} bridge calls/s": b["calls_per_s"],
                            f"{k} bridge p50 µs": get(b, "latency_us.p50"),
                            f"{k} bridge p99 µs": get(b, "latency_us.p99"),
                            f"{k} added p50 µs": added and added["p50"],
                            f"{k} added p99 µs": added and added["p99"],
                            f"{k} bridge CPU µs/call": b["bridge_cpu_us_per_call"]})
            for t, r in [("direct", d), ("bridge", b), *extras.items()]:
                extra_rows.append([c, i, t, r["calls_per_s"], *[msf(get(r, f"latency_us.{q}"))
                                                               for q in ("p50", "p90", "p99")],
                                   r["bridge_cpu_us_per_call"], r["server_cpu_us_per_call"],
                                   r.get("generator_cpu_us_per_call"), r["errors"]])
    m = s.machine
    md = [f"## weft MCP bridge benchmark, {m['date']}", "",
          f"{m['cpu']}, {m['cores']} cores, git {m['git']}; MCP server (`weft-loadtest "
          f"mcp-server`, {a.server_threads} thread(s)), `weft up` (substrate) and "
          f"`weft-mcp-bridge` on the same machine; generator {a.gen_threads} thread(s); "
          f"{a.duration} per run after {a.warmup} warm-up; hypervisor steal "
          f"{m['cpu_steal_pct']}% of CPU time over the run; load average at the end "
          f"{' '.join(loadavg())}", "",
          "`echo` tool calls, closed loop. direct: one MCP session per worker to the server; "
          "bridge: gRPC `CallTool` to `weft-mcp-bridge` (internal JWT, as the executor), which "
          "calls the server on its pooled session. Latencies in ms; added = bridge − direct at the "
          "same percentile; CPU in µs per call (warm-up included).", "",
          table(["workers", "pair", "direct calls/s", "direct p50", "direct p99", "bridge calls/s",
                 "bridge p50", "bridge p99", "added p50", "added p99", "bridge CPU µs/call",
                 "server CPU µs/call (direct / bridge)", "weft CPU µs/call",
                 "errors (direct / bridge)", "load avg before (direct / bridge)"], rows,
                ["r"] * 14 + ["l"])]
    if a.extra_targets:
        md += ["", "Profiling runs (same sitting, after each pair): `pool` = the bridge's session "
               "pool in the generator's process (the bridge's MCP half, no gRPC); `bridge-hop` = "
               "`CallTool` refused after the JWT check and the definition lookup (the gRPC hop and "
               "the bridge's front half, no MCP call); `bridge-in-process` = the bridge in the "
               "generator's process called through the in-process transport, as `weft up` runs it "
               "(its CPU counts as the generator's).", "",
               table(["workers", "pair", "target", "calls/s", "p50", "p90", "p99",
                      "bridge CPU µs/call", "server CPU µs/call", "generator CPU µs/call",
                      "errors"], extra_rows, ["r", "r", "l"] + ["r"] * 8)]
    return "\n".join(md) + "\n", figures
