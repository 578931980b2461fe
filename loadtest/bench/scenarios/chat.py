"""`chat`: the chat door. What weft adds in front of an instant OpenAI-compatible upstream
(closed loop at each concurrency, direct vs through weft, and streaming), the peers beside it in
the same sitting (`--peers`: the floor of one hop, `weft-loadtest proxy` and nginx as reverse
proxies, and the gateways users would pick instead, Portkey's and LiteLLM's; each one's CPU per
request and added latency against weft's), and the highest fixed rate whose p99 stays under a
limit, through weft and directly. With `--doors chat,responses` (the
default) every closed-loop and streaming run through weft is also sent to the Responses door
(`POST /v1/responses`, `store: false`) right after the chat one, so the two doors' CPU per
request compare in the same sitting.
"""

import shutil
import subprocess
import time

from .. import peers as peer_mod
from ..common import (SPLIT_BINARIES, BenchError, duration, get, int_list, log, rnd, seconds,
                      status_kib, table, upstream_config, word_list)

HELP = "the chat door: added latency, CPU per request beside nginx and peer gateways, max RPS"
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
    p.add_argument("--peers", type=word_list, default=["proxy", "nginx"],
                   help="what else the closed-loop (and streaming) runs go through, each in front "
                        "of the same upstream: proxy (`weft-loadtest proxy`, a bare hyper reverse "
                        "proxy), nginx (reverse proxy, the floor of one hop), portkey (Portkey's "
                        "gateway, pinned in loadtest/peers/portkey, npm-installed on first use), "
                        "litellm (LiteLLM's proxy, pip-installed on first use into "
                        "target/peers); default proxy,nginx (a peer not installed here is "
                        "skipped with a note)")
    p.add_argument("--no-proxy", action="store_true",
                   help="no peers at all (the same as --peers '')")
    p.add_argument("--wrk", action="store_true",
                   help="also send each closed-loop level with wrk (-t1, keep-alive, the same "
                        "request) to direct, weft and every peer, each one's CPU per request read "
                        "from /proc over wrk's run: the figures of a generator nobody here wrote "
                        "beside weft-loadtest's")
    p.add_argument("--log-level", default="info",
                   help="weft's telemetry.log_level (default info, weft's own default)")
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
    p.add_argument("--upstream", choices=["loadtest", "nginx"], default="loadtest",
                   help="the upstream: `weft-loadtest upstream` (default), or nginx returning "
                        "that upstream's answer as a fixed body (no streaming runs then)")
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
    upstream_pids = [upstream.pid]
    if a.upstream == "nginx":
        port, upstream = nginx_upstream(s, direct_url)
        direct_url = f"http://127.0.0.1:{port}/v1"
        upstream_pids = peer_mod.descendants(upstream.pid)  # the master and its worker
        a.stream_concurrency = []
    peers, skipped = peer_mod.start_all(s, [] if a.no_proxy or a.soak else a.peers, port)
    a.peers_run, a.peers_skipped = [p.name for p in peers], skipped
    fleet = s.fleet(upstream_config(port, a.log_level), arrangement=a.arrangement)
    weft_url = fleet.url + "/v1"
    server_pids = s.server_pids(fleet, ["gateway", "router"])
    log(f"weft ({a.arrangement}) at {weft_url}, pids {server_pids}")
    idle_rss = sum(status_kib(p, "VmRSS") or 0 for p in server_pids)
    top = max(a.concurrency) if a.concurrency else None

    by_name = {p.name: p for p in peers}

    def chat(target, name, *args):
        out = s.out / f"{name}.json"
        env = {}
        if target in ("weft", "weft-responses", "weft-responses-stored"):
            url, model, pids = weft_url, "bench", server_pids
            env["WEFT_LOADTEST_TOKEN"] = fleet.token
            if target != "weft":
                args = (*args, "--door", target.removeprefix("weft-"))
        elif target in by_name:
            peer = by_name[target]
            url, model, pids = peer.url, peer.model, peer.pids
            args = (*args, *[x for h in peer.headers for x in ("--header", h)])
        else:
            # The upstream's own CPU per request: one bare axum server, the floor of a hop.
            url, model, pids = direct_url, "bench-model", upstream_pids
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
    a.peer_failures = {}

    def through_peer(p, name, *args):
        """A peer's run; one that fails (a peer's own bug) is noted in the summary, not fatal."""
        try:
            chat(p.name, f"{p.name}-{name}", *args)
        except BenchError as e:
            log(f"{p.name}: the {name} run failed: {e}")
            a.peer_failures[f"{p.name} {name}"] = str(e).splitlines()[0][:300]
            return
        s.loadtest_compare(f"direct-{name}", f"{p.name}-{name}", f"compare-{p.name}-{name}")

    for p in peers:
        for c in a.concurrency:
            through_peer(p, f"c{c}", "--concurrency", c, *length)
    for c in a.stream_concurrency:
        pair(f"stream-c{c}", "--concurrency", c, "--stream", *length)
        for p in peers:
            through_peer(p, f"stream-c{c}", "--concurrency", c, "--stream", *length)

    if a.wrk:
        a.wrk_rows = wrk_runs(s, a, upstream_pids, direct_url, weft_url, fleet.token, server_pids,
                              peers)
    searches = {}
    if not a.no_rates:
        for target in ("weft", "direct"):
            searches[target] = search(a, target, chat)
            s.write_json(f"max-rps-{target}.json", searches[target])
    return summarise(s, idle_rss, searches)


def nginx_upstream(s, loadtest_url):
    """nginx in place of the upstream, answering what `weft-loadtest upstream` answers."""
    import json
    import urllib.request
    if not shutil.which("nginx"):
        raise BenchError("--upstream nginx needs nginx (apt-get install nginx-light)")
    body = json.dumps({"model": "bench-model", "messages": [
        {"role": "user", "content": "Say hello to the load generator in a few words."}]}).encode()
    req = urllib.request.Request(loadtest_url + "/chat/completions", body, method="POST",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        answer = r.read().decode()
    port, proc = peer_mod.fixed_answer_upstream(s, answer)
    proc.ready = {"base_url": f"http://127.0.0.1:{port}/v1"}
    return port, proc


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
    if a.peers_run or a.peers_skipped:
        lines += ["", peers_table(s, names, figures)]
    if getattr(a, "wrk_rows", None):
        lines += ["", "The same closed-loop levels sent with wrk (`-t1`, one connection per "
                  "worker kept alive, the same request body; no warm-up: its window includes "
                  "connecting), CPU per request read from /proc over wrk's run:", "",
                  table(["run", "target", "rps", "p50", "p99", "errors", "CPU µs/req",
                         "weft-loadtest CPU µs/req"], a.wrk_rows)]
        for r in a.wrk_rows:
            figures[f"wrk {r[0]} {r[1]} CPU µs/req"] = r[6] or None
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


PEER_WHAT = {
    "proxy": "`weft-loadtest proxy`, a bare hyper reverse proxy (no parsing, auth, routing or "
             "accounting)",
    "nginx": "nginx as a reverse proxy (keep-alive upstream, no access log, no buffering), "
             "the floor of one hop",
    "portkey": "Portkey's gateway (Node), the version pinned in loadtest/peers/portkey",
    "litellm": f"LiteLLM's proxy (Python, one worker) {peer_mod.LITELLM_VERSION}",
}


def peers_table(s, names, figures):
    """Every peer beside weft, run by run: its latency added over direct and its CPU per request
    (all of its processes), and weft's as a multiple of each."""
    a = s.args
    out = ["The peers, in front of the same upstream in the same sitting; *added* is over "
           "direct; CPU is each one's own (all its processes) per request; *weft ÷* is weft's "
           "figure over the peer's.", ""]
    for p in a.peers_run:
        out.append(f"- {p}: {PEER_WHAT[p]}")
    for p, why in a.peers_skipped.items():
        out.append(f"- {p}: not run ({why})")
    for run, why in a.peer_failures.items():
        out.append(f"- {run}: failed ({why})")
    rows = []
    for name in names:
        wc_doc, wx = s.read_json(f"weft-{name}.json"), s.read_json(f"compare-{name}.json")
        wc, wadd = get(wc_doc, "server.cpu_us_per_request"), wx["added_latency_us"]["p50"]
        rows.append([name, "weft", wx["through_latency_us"]["p50"], wadd,
                     wx["through_latency_us"]["p99"], wc_doc["rps"], wc_doc["errors"], wc, "", "",
                     ""])
        for p in a.peers_run:
            try:
                doc, x = (s.read_json(f"{k}-{name}.json") for k in (p, f"compare-{p}"))
            except OSError:
                continue
            pc, padd = get(doc, "server.cpu_us_per_request"), x["added_latency_us"]["p50"]
            cpu_ratio = rnd(wc / pc, 2) if wc and pc else None
            add_ratio = rnd(wadd / padd, 2) if wadd and padd and padd > 0 else None
            rps_ratio = rnd(wc_doc["rps"] / doc["rps"], 2) if doc["rps"] else None
            rows.append([name, p, x["through_latency_us"]["p50"], padd,
                         x["through_latency_us"]["p99"], doc["rps"], doc["errors"], pc, cpu_ratio,
                         add_ratio, rps_ratio])
            figures.update({f"{name} {p} CPU µs/req": pc, f"{name} {p} added p50 µs": padd,
                            f"{name} {p} rps": doc["rps"],
                            f"{name} weft ÷ {p} CPU": cpu_ratio,
                            f"{name} weft ÷ {p} added p50": add_ratio,
                            f"{name} weft ÷ {p} rps": rps_ratio})
    out += ["", table(["run", "target", "p50", "added p50", "p99", "rps", "errors", "CPU µs/req",
                       "weft ÷ CPU", "weft ÷ added p50", "weft ÷ rps"], rows)]
    return "\n".join(out)


WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
for k, v in string.gmatch(os.getenv("WRK_HEADERS") or "", "([^:\\n]+):%s*([^\\n]*)\\n") do
  wrk.headers[k] = v
end
wrk.body = os.getenv("WRK_BODY")
done = function(summary, latency, requests)
  local e = summary.errors
  io.stderr:write(string.format(
    '{"requests":%d,"errors":%d,"p50":%d,"p99":%d,"duration_us":%d}\\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
"""


def wrk_runs(s, a, upstream_pids, direct_url, weft_url, token, weft_pids, peers):
    """Each closed-loop level with wrk against direct, weft and every peer. The request is the
    one `weft-loadtest chat` sends; CPU is read from /proc around wrk's whole run."""
    import json
    import os
    from ..common import HZ, proc_ticks
    if not shutil.which("wrk"):
        raise BenchError("--wrk needs wrk (apt-get install wrk)")
    script = s.tmp / "chat.lua"
    script.write_text(WRK_LUA)
    prompt = "Say hello to the load generator in a few words."
    targets = [("direct", direct_url, "bench-model", upstream_pids, [])]
    targets.append(("weft", weft_url, "bench", weft_pids, [f"authorization: Bearer {token}"]))
    targets += [(p.name, p.url, p.model, p.pids, p.headers) for p in peers]
    d = seconds(a.duration)
    rows = []
    for c in a.concurrency:
        for name, url, model, pids, headers in targets:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                               "stream": False})
            env = dict(os.environ, WRK_BODY=body, WRK_HEADERS="".join(h + "\n" for h in headers))
            t0 = sum(map(proc_ticks, pids))
            r = subprocess.run(["wrk", "-t1", f"-c{c}", f"-d{int(d)}s", "-s", str(script),
                                f"{url}/chat/completions"], env=env, capture_output=True,
                               text=True)
            cpu_s = (sum(map(proc_ticks, pids)) - t0) / HZ
            (s.out / f"wrk-{name}-c{c}.txt").write_text(r.stdout + r.stderr)
            doc = next((json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")), None)
            if r.returncode or not doc or not doc["requests"]:
                log(f"wrk against {name} failed: {r.stderr.strip()[-400:]}")
                rows.append([f"c{c}", name, "failed", "", "", "", "", ""])
                continue
            try:
                lt = get(s.read_json(f"{name}-c{c}.json"), "server.cpu_us_per_request")
            except OSError:
                lt = None
            rows.append([f"c{c}", name, round(doc["requests"] * 1e6 / doc["duration_us"]),
                         doc["p50"], doc["p99"], doc["errors"],
                         round(cpu_s * 1e6 / doc["requests"], 1), lt])
            time.sleep(1)
    return rows
