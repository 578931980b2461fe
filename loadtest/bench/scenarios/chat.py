"""`chat`: the chat door. What weft adds in front of an instant OpenAI-compatible upstream
(closed loop at each concurrency, direct vs through weft, and streaming), the floor under it
(the same runs through `weft-loadtest proxy`, a bare reverse proxy), and the highest fixed rate
whose p99 stays under a limit, through weft and directly. With `--doors chat,responses` (the
default) every closed-loop and streaming run through weft is also sent to the Responses door
(`POST /v1/responses`, `store: false`) right after the chat one, so the two doors' CPU per
request compare in the same sitting.
"""

import shutil
import subprocess
import time

from ..common import (SPLIT_BINARIES, BenchError, duration, get, int_list, log, rnd, seconds,
                      status_kib, table, upstream_config)

HELP = "the chat door: added latency, the proxy floor, max RPS"
DURATION = "10s"
BINARIES_UP = ["weft"]
BINARIES_SPLIT = SPLIT_BINARIES
RATES = "500,1000,2000,3000,4000,6000,8000,12000,16000,24000,32000,48000,64000"


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[1, 64],
                   help="closed-loop levels, direct and through weft (default 1,64)")
    p.add_argument("--stream-concurrency", type=int_list, default=[1],
                   help="streaming levels (default 1; empty '' for none)")
    p.add_argument("--doors", type=lambda v: [d for d in v.split(",") if d], default=["chat", "responses"],
                   help="weft's doors each run goes through: chat (/v1/chat/completions, always "
                        "first), responses (/v1/responses, store false) and responses-stored "
                        "(store true, one insert per request); default chat,responses")
    p.add_argument("--arrangement", choices=["up", "split"], default="up",
                   help="`weft up`, or split (tests/harness/fleet.py: every service its own process; weft's CPU and memory are then the gateway's and the router's together)")
    p.add_argument("--no-proxy", action="store_true",
                   help="skip the floor (the closed-loop runs through `weft-loadtest proxy`)")
    p.add_argument("--no-rates", action="store_true", help="skip the max-RPS search")
    p.add_argument("--rates", type=int_list, default=int_list(RATES),
                   help="rates tried in turn until one fails (default %(default)s)")
    p.add_argument("--rate-duration", type=duration, help="per rate run (default: --duration)")
    p.add_argument("--rate-attempts", type=int, default=2,
                   help="runs per rate; one passing suffices (default 2)")
    p.add_argument("--refine-steps", type=int, default=2,
                   help="bisection steps after the first failing rate (default 2)")
    p.add_argument("--p99-limit-us", type=int, default=20000)
    p.add_argument("--max-error-ratio", type=float, default=0.001)
    p.add_argument("--upstream-threads", type=int, default=1)
    p.add_argument("--soak", metavar="SECONDS", type=int,
                   help="a memory soak instead of the pairs and the rate search: one run at "
                        "--soak-rate through weft for this long, weft's RSS and open fds sampled "
                        "every --soak-sample seconds into rss.csv")
    p.add_argument("--soak-rate", type=int, default=2000)
    p.add_argument("--soak-sample", type=int, default=30)
    p.add_argument("--profile", action="store_true",
                   help="perf-record weft during the highest closed-loop level through weft and "
                        "split its CPU by stage (perf-stages.py) into stages-c<N>.md")
    p.add_argument("--perf-freq", type=int, default=999)
    p.add_argument("--perf-callgraph", default="-g",
                   help="perf record's call-graph option (release builds have no frame "
                        "pointers: '--call-graph dwarf,16384')")


def binaries(args):
    return BINARIES_SPLIT if args.arrangement == "split" else BINARIES_UP


def run(s):
    a = s.args
    upstream = s.serve("upstream", "upstream", "--threads", a.upstream_threads)
    direct_url = upstream.ready["base_url"]
    port = direct_url.rsplit(":", 1)[1].split("/")[0]
    proxy = None
    if not a.no_proxy and not a.soak:
        proxy = s.serve("proxy", "proxy", "--upstream", f"http://127.0.0.1:{port}")
    fleet = s.fleet(upstream_config(port), arrangement=a.arrangement)
    weft_url = fleet.url + "/v1"
    server_pids = s.server_pids(fleet, ["gateway", "router"])
    log(f"weft ({a.arrangement}) at {weft_url}, pids {server_pids}")
    idle_rss = sum(status_kib(p, "VmRSS") or 0 for p in server_pids)
    top = max(a.concurrency) if a.concurrency else None

    def chat(target, name, *args):
        out = s.out / f"{name}.json"
        env = {}
        if target in ("weft", "weft-responses", "weft-responses-stored"):
            url, model, pids = weft_url, "bench", server_pids
            env["WEFT_LOADTEST_TOKEN"] = fleet.token
            if target != "weft":
                args = (*args, "--door", target.removeprefix("weft-"))
        elif target == "proxy":
            url, model, pids = proxy.ready["base_url"], "bench-model", [proxy.pid]
        else:
            # The upstream's own CPU per request: one bare axum server, the floor of a hop.
            url, model, pids = direct_url, "bench-model", [upstream.pid]
        perf = None
        if a.profile and target == "weft" and name == f"weft-c{top}":
            perf = start_perf(s, server_pids)
        try:
            report = s.loadtest("chat", "--url", url, "--model", model, "--threads", a.gen_threads,
                                *[x for p in pids for x in ("--server-pid", p)], *args,
                                out=out, env=env)
        finally:
            if perf:
                finish_perf(s, perf, out, f"stages-c{top}.md")
        time.sleep(1)
        return report

    def pair(name, *args):
        chat("direct", f"direct-{name}", *args)
        chat("weft", f"weft-{name}", *args)
        s.loadtest_compare(f"direct-{name}", f"weft-{name}", f"compare-{name}")
        for door in ("responses", "responses-stored"):
            if door in a.doors:
                chat(f"weft-{door}", f"weft-{door}-{name}", *args)
                s.loadtest_compare(f"direct-{name}", f"weft-{door}-{name}",
                                   f"compare-{door}-{name}")

    if a.soak:
        return soak(s, chat, server_pids, idle_rss)
    length = ["--duration", a.duration, "--warmup", a.warmup]
    for c in a.concurrency:
        pair(f"c{c}", "--concurrency", c, *length)
    if proxy:
        for c in a.concurrency:
            chat("proxy", f"proxy-c{c}", "--concurrency", c, *length)
            s.loadtest_compare(f"direct-c{c}", f"proxy-c{c}", f"compare-proxy-c{c}")
    for c in a.stream_concurrency:
        pair(f"stream-c{c}", "--concurrency", c, "--stream", *length)

    searches = {}
    if not a.no_rates:
        for target in ("weft", "direct"):
            searches[target] = search(a, target, chat)
            s.write_json(f"max-rps-{target}.json", searches[target])
    return summarise(s, idle_rss, searches)


def soak(s, chat, pids, idle_rss):
    """RSS under a fixed rate for a long time. It follows the requests in flight: a stall piles
    them up and the generator opens connections up to its in-flight cap, which stay open (the fds
    column), so growth a stall explains is not a leak; a leak grows between stalls."""
    import os
    import threading
    a = s.args
    fds = lambda: sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids if os.path.exists(f"/proc/{p}/fd"))
    rss = lambda: sum(status_kib(p, "VmRSS") or 0 for p in pids)
    samples = [(0, idle_rss, fds())]
    done = threading.Event()

    def sample():
        t0 = time.monotonic()
        while not done.wait(a.soak_sample):
            samples.append((round(time.monotonic() - t0), rss(), fds()))
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        r = chat("weft", "soak", "--rate", a.soak_rate, "--duration", f"{a.soak}s", "--warmup", a.warmup)
    finally:
        done.set()
        t.join()
    (s.out / "rss.csv").write_text("seconds,rss_kib,fds\n" + "".join(f"{x},{y},{z}\n" for x, y, z in samples))
    load = [v for _, v, _ in samples[1:]] or [idle_rss]
    m = s.machine
    md = "\n".join([
        f"## weft soak, {m['date']}: {a.soak_rate} requests/s for {a.soak} s ({a.arrangement})", "",
        f"{r['requests']} requests, {r['errors']} errors, {r['rps']} rps, p50 "
        f"{get(r, 'latency_us.p50')} µs, p99 {get(r, 'latency_us.p99')} µs, max "
        f"{get(r, 'latency_us.max')} µs (the generator caps requests in flight at "
        f"{r.get('max_in_flight')}), weft CPU {get(r, 'server.cpu_us_per_request')} µs/request", "",
        "RSS under a fixed rate follows the requests in flight: a stall (the max above) piles them "
        "up, the generator opens connections up to its in-flight cap, and they stay open (the fds "
        "column of rss.csv). Growth that a stall explains is not a leak; a leak grows between "
        "stalls.", "",
        f"RSS idle {idle_rss // 1024} MiB; under load first {load[0] / 1024:.1f} MiB, last "
        f"{load[-1] / 1024:.1f} MiB, max {max(load) / 1024:.1f} MiB; growth first to last "
        f"{(load[-1] - load[0]) / 1024:+.1f} MiB"])
    figures = {"soak p99 µs": get(r, "latency_us.p99"),
               "soak weft CPU µs/req": get(r, "server.cpu_us_per_request"),
               "soak RSS last MiB": round(load[-1] / 1024, 1),
               "soak RSS growth MiB": round((load[-1] - load[0]) / 1024, 1)}
    return md + "\n", figures


def start_perf(s, pids):
    if not shutil.which("perf"):
        raise BenchError("--profile needs perf")
    w, d = seconds(s.args.warmup), seconds(s.args.duration)
    data = s.out / "perf.data"
    cmd = (f"sleep {w} && exec perf record -e cpu-clock -F {s.args.perf_freq} "
           f"{s.args.perf_callgraph} -p {','.join(map(str, pids))} -o {data} -- sleep {d}")
    return s.spawn("perf", ["sh", "-c", cmd]), data


def finish_perf(s, perf, report_path, md_name):
    proc, data = perf
    proc.popen.wait(timeout=seconds(s.args.duration) + seconds(s.args.warmup) + 60)
    requests = s.read_json(report_path.name).get("requests")
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True)
    stages = subprocess.run(["python3", str(s.root / "loadtest/perf-stages.py"),
                             "--freq", str(s.args.perf_freq), "--requests", str(requests)],
                            input=script.stdout, capture_output=True)
    if stages.returncode == 0:
        (s.out / md_name).write_bytes(stages.stdout)
    else:
        log("perf-stages failed; no stage split")


def search(a, target, chat):
    """Rates in turn until one fails the limits, then bisection between the last passing and
    the first failing; a rate passes when one of --rate-attempts runs does (a burst of
    hypervisor steal can sink a single run)."""
    duration = a.rate_duration or a.duration

    def passes(rate):
        for attempt in range(1, a.rate_attempts + 1):
            name = f"{target}-rate-{rate}"
            try:
                r = chat(target, name, "--rate", rate, "--duration", duration, "--warmup", a.warmup)
            except BenchError as e:
                log(f"{target}: the {rate}/s run failed ({e}; attempt {attempt})")
                continue
            p99 = get(r, "latency_us.p99")
            if p99 is not None and p99 < a.p99_limit_us and r["errors"] <= a.max_error_ratio * r["requests"]:
                return r
            log(f"{target}: {rate}/s fails (attempt {attempt} of {a.rate_attempts}; p99 {p99} µs, "
                f"errors {r['errors']} of {r['requests']})")
        return None

    tried, best, fail = [], None, None
    for rate in a.rates:
        tried.append(rate)
        r = passes(rate)
        if r:
            best = (rate, r)
        else:
            fail = rate
            break
    if fail is not None:
        lo, hi = (best[0] if best else 0), fail
        for _ in range(a.refine_steps):
            mid = (lo + hi) // 2 // 50 * 50
            if not lo < mid < hi:
                break
            tried.append(mid)
            r = passes(mid)
            if r:
                lo, best = mid, (mid, r)
            else:
                hi = mid
    doc = {"target": target, "p99_limit_us": a.p99_limit_us, "rate": None, "tried": tried}
    if best:
        rate, r = best
        doc.update(rate=rate, limit_found=fail is not None, rps=r["rps"],
                   p50_us=get(r, "latency_us.p50"), p99_us=get(r, "latency_us.p99"),
                   errors=r["errors"], requests=r["requests"],
                   send_lag_p99_us=get(r, "send_lag_us.p99"))
    return doc


def summarise(s, idle_rss, searches):
    a = s.args
    m = s.machine
    figures = {}
    lines = [f"## weft gateway benchmark, {m['date']}", "",
             f"{m['cpu']}, {m['cores']} cores, git {m['git']}, arrangement `{a.arrangement}`; "
             f"generator {a.gen_threads} thread(s), upstream {a.upstream_threads} thread(s); "
             f"{a.duration} per run after {a.warmup} warm-up; hypervisor steal "
             f"{m['cpu_steal_pct']}% of CPU time over the run; a rate passes when one of "
             f"{a.rate_attempts} attempts does", "",
             "Latencies in µs; *added* = through weft − direct at the same percentile.", "",
             f"weft's CPU (user + system of the weft process, or of the gateway and router "
             f"processes together, over the measured window) per request, and its resident "
             f"memory: {idle_rss // 1024} MiB idle.", "",
             "*upstream CPU* is the upstream's own CPU per request in the direct run: one bare "
             "axum server that parses the JSON request and answers, the floor of one HTTP hop on "
             "this machine (weft serves one hop and makes another).", ""]
    rows = []
    names = [f"c{c}" for c in a.concurrency] + [f"stream-c{c}" for c in a.stream_concurrency]
    for name in names:
        c, w, d = (s.read_json(f"{k}-{name}.json") for k in ("compare", "weft", "direct"))
        rows.append([name, c["direct_latency_us"]["p50"], c["through_latency_us"]["p50"],
                     c["added_latency_us"]["p50"], c["direct_latency_us"]["p99"],
                     c["through_latency_us"]["p99"], c["added_latency_us"]["p99"],
                     d["rps"], w["rps"], w["errors"], get(d, "server.cpu_us_per_request"),
                     get(w, "server.cpu_us_per_request"), get(w, "server.rss_kib", 0) // 1024])
        figures.update({f"{name} weft p50 µs": c["through_latency_us"]["p50"],
                        f"{name} weft p99 µs": c["through_latency_us"]["p99"],
                        f"{name} added p50 µs": c["added_latency_us"]["p50"],
                        f"{name} added p99 µs": c["added_latency_us"]["p99"],
                        f"{name} weft rps": w["rps"],
                        f"{name} weft CPU µs/req": get(w, "server.cpu_us_per_request"),
                        f"{name} weft RSS MiB": get(w, "server.rss_kib", 0) // 1024})
        if name.startswith("stream"):
            rows.append([f"{name} time to first byte", "", "", get(c, "added_ttfb_us.p50"), "", "",
                         get(c, "added_ttfb_us.p99"), "", "", "", "", "", ""])
    lines += [table(["run", "direct p50", "weft p50", "added p50", "direct p99", "weft p99",
                     "added p99", "direct rps", "weft rps", "weft errors", "upstream CPU µs/req",
                     "weft CPU µs/req", "weft RSS MiB"], rows)]
    for door in ("responses", "responses-stored"):
        if door not in a.doors:
            continue
        store = "true: one insert per request" if door == "responses-stored" else "false"
        lines += ["", f"The Responses door (`POST /v1/responses`, `store: {store}`), run right "
                  "after each chat run above against the same upstream; *ratio* = its weft CPU "
                  "per request ÷ the chat door's.", ""]
        rows = []
        for name in names:
            c, w, base = (s.read_json(f"{k}-{name}.json")
                          for k in (f"compare-{door}", f"weft-{door}", "weft"))
            rc, cc = get(w, "server.cpu_us_per_request"), get(base, "server.cpu_us_per_request")
            ratio = rnd(rc / cc, 3) if rc and cc else None
            rows.append([name, c["through_latency_us"]["p50"], c["added_latency_us"]["p50"],
                         c["through_latency_us"]["p99"], c["added_latency_us"]["p99"], w["rps"],
                         w["errors"], rc, cc, ratio])
            figures.update({f"{name} {door} CPU µs/req": rc,
                            f"{name} {door} added p50 µs": c["added_latency_us"]["p50"],
                            f"{name} {door} ÷ chat CPU": ratio})
        lines += [table(["run", "weft p50", "added p50", "weft p99", "added p99", "weft rps",
                         "weft errors", f"{door} CPU µs/req", "chat CPU µs/req", "ratio"], rows)]
    if not a.no_proxy:
        lines += ["", "The floor: the same runs through `weft-loadtest proxy`, a bare axum + hyper "
                  "reverse proxy to the same upstream (no parsing, auth, routing or accounting); "
                  "*added* is over direct, CPU is the proxy's.", ""]
        rows = []
        for c in a.concurrency:
            x, p, w = (s.read_json(f"{k}-c{c}.json") for k in ("compare-proxy", "proxy", "weft"))
            pc, wc = get(p, "server.cpu_us_per_request"), get(w, "server.cpu_us_per_request")
            rows.append([f"c{c}", x["through_latency_us"]["p50"], x["added_latency_us"]["p50"],
                         x["through_latency_us"]["p99"], x["added_latency_us"]["p99"], p["rps"],
                         pc, rnd(wc - pc, 1) if None not in (pc, wc) else None])
            figures[f"c{c} weft CPU µs/req − proxy's"] = rnd(wc - pc, 1) if None not in (pc, wc) else None
        lines += [table(["run", "proxy p50", "added p50", "proxy p99", "added p99", "proxy rps",
                         "proxy CPU µs/req", "weft CPU µs/req − proxy's"], rows)]
    if searches:
        lines += ["", f"Highest fixed rate with p99 < {a.p99_limit_us // 1000} ms and errors ≤ "
                  f"{a.max_error_ratio}:", ""]
        rows = []
        for target in ("weft", "direct"):
            r = searches[target]
            rate = ("none" if r["rate"] is None else
                    r["rate"] if r.get("limit_found") else f"≥ {r['rate']}")
            rows.append([target, rate, r.get("rps"), r.get("p50_us"), r.get("p99_us"),
                         r.get("send_lag_p99_us"), ", ".join(map(str, r["tried"]))])
            figures[f"max rate/s {target}"] = r["rate"]
        lines += [table(["target", "rate/s", "achieved rps", "p50", "p99",
                         "generator send-lag p99", "rates tried"], rows,
                        ["l", "r", "r", "r", "r", "r", "l"])]
    for name in (f"stages-c{max(a.concurrency)}.md",) if a.concurrency else ():
        if (s.out / name).exists():
            lines += ["", f"weft's CPU by stage at c{max(a.concurrency)} (perf):", "",
                      (s.out / name).read_text().strip()]
    return "\n".join(lines) + "\n", figures
