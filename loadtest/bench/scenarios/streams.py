"""`streams`: many paced streams, directly from the paced upstream and through weft with the
same shape, every frame checked and timed; each direct/through pair compared (frames lost, the
inter-frame gap weft adds), with the CPU per frame of weft, the generator and the upstream; and
the same streams through the peers (`--peers`, default nginx with `proxy_buffering off`, the floor
of one hop per frame), each one's CPU per frame beside weft's."""

import time

from .. import peers as peer_mod
from ..common import (Machine, int_list, log, proc_ticks, HZ, loadavg, pids_named, rnd, table,
                      upstream_config, word_list)

HELP = "paced streams direct vs through weft: lost frames, added gap"
DURATION = "20s"
BINARIES = ["weft"]


def add_args(p):
    p.add_argument("--concurrency", type=int_list, default=[512], help="default 512")
    p.add_argument("--deltas", type=int, default=64)
    p.add_argument("--gap-ms", type=int, default=20)
    p.add_argument("--rounds", type=int,
                   help="measured streams per worker (instead of --duration, each worker's time)")
    p.add_argument("--warmup-rounds", type=int, default=1)
    p.add_argument("--repeat", type=int, default=1, help="direct/through pairs per level")
    p.add_argument("--upstream-threads", type=int, default=1)
    p.add_argument("--peers", type=word_list, default=["nginx"],
                   help="the same streams through these too, each in front of the same upstream "
                        "(nginx, proxy, portkey, litellm: see `chat --help`); default nginx; '' "
                        "for none")
    p.add_argument("--log-level", default="info",
                   help="weft's telemetry.log_level (default info, weft's own default)")


def run(s):
    a = s.args
    up = s.serve("upstream", "upstream", "--threads", a.upstream_threads, "--deltas", a.deltas,
                 "--gap-ms", a.gap_ms)
    direct_url = up.ready["base_url"]
    port = direct_url.rsplit(":", 1)[1].split("/")[0]
    peers, _ = peer_mod.start_all(s, a.peers, port)
    a.peers_run = [p.name for p in peers]
    by_name = {p.name: p for p in peers}
    fleet = s.fleet(upstream_config(port, a.log_level))
    weft_url = fleet.url + "/v1"
    weft_pids = s.server_pids(fleet)
    log(f"weft at {weft_url} (pids {weft_pids})")
    length = ["--rounds", a.rounds] if a.rounds else ["--duration", a.duration]

    def one(target, name, c):
        env, pids, headers = {}, weft_pids, []
        if target == "weft":
            url, model = weft_url, "bench"
            env = {"WEFT_LOADTEST_TOKEN": fleet.token}
        elif target in by_name:
            p = by_name[target]
            url, model, pids = p.url, p.model, p.pids
            headers = [x for h in p.headers for x in ("--header", h)]
        else:
            url, model = direct_url, "bench-model"
        rustc0 = len(pids_named("rustc"))
        m0, w0, u0 = Machine(), sum(map(proc_ticks, pids)), proc_ticks(up.pid)
        log(f"{name}: {c} streams × {a.deltas} deltas, {a.gap_ms} ms apart, against {url}")
        s.loadtest("streams", "--url", url, "--model", model, "--concurrency", c, "--deltas",
                   a.deltas, "--gap-ms", a.gap_ms, *length, "--warmup-rounds", a.warmup_rounds,
                   "--threads", a.gen_threads, *headers, out=s.out / f"{name}.json", env=env)
        mm = Machine.since(m0)
        w, u, wall = (sum(map(proc_ticks, pids)) - w0) / HZ, (proc_ticks(up.pid) - u0) / HZ, mm["wall_s"]
        rec = {"wall_s": wall, "machine_busy_pct": mm["busy_pct"], "cpu_steal_pct": mm["steal_pct"],
               "weft_cpu_s": w, "upstream_cpu_s": u,
               "weft_cpu_pct": round(100 * w / wall, 1) if wall else None,
               "upstream_cpu_pct": round(100 * u / wall, 1) if wall else None,
               "loadavg_1m_after": float(loadavg()[0]),
               "rustc_processes": [rustc0, len(pids_named("rustc"))]}
        s.write_json(f"{name}-machine.json", rec)
        if sum(rec["rustc_processes"]):
            log(f"warning: a compiler ran during {name}; its numbers are noisy")
        time.sleep(2)

    for c in a.concurrency:
        for i in range(1, a.repeat + 1):
            one("direct", f"direct-c{c}-{i}", c)
            one("weft", f"weft-c{c}-{i}", c)
            s.loadtest_compare(f"direct-c{c}-{i}", f"weft-c{c}-{i}", f"compare-c{c}-{i}")
            for p in peers:
                one(p.name, f"{p.name}-c{c}-{i}", c)
                s.loadtest_compare(f"direct-c{c}-{i}", f"{p.name}-c{c}-{i}",
                                   f"compare-{p.name}-c{c}-{i}")
    return summarise(s)


def per_frame(cpu_s, r):
    return round(cpu_s * 1e6 / r["frames_received"]) if r["frames_received"] and cpu_s is not None else None


def row(s, stem, label):
    r, m = s.read_json(f"{stem}.json"), s.read_json(f"{stem}-machine.json")
    g = lambda k, q: (r.get(k) or {}).get(q)
    return [label, f"{r['streams_completed']}/{r['streams_started']}", r["frames_expected"],
            r["frames_lost"], r["frames_duplicated"] + r["frames_out_of_order"] + r["frames_unexpected"],
            r["events_coalesced"], g("gap_us", "p50"), g("gap_us", "p90"), g("gap_us", "p99"),
            g("gap_us", "p999"), g("gap_us", "max"), g("ttff_us", "p50"), g("ttff_us", "p99"),
            g("schedule_lag_us", "p99"), r["frames_per_s"], r.get("generator_cpu_pct"),
            m["upstream_cpu_pct"], m["weft_cpu_pct"], per_frame(m["weft_cpu_s"], r),
            per_frame(r.get("generator_cpu_s"), r), per_frame(m["upstream_cpu_s"], r),
            m["machine_busy_pct"], m["cpu_steal_pct"], m["loadavg_1m_after"],
            "→".join(map(str, m["rustc_processes"]))], r, m


def summarise(s):
    a = s.args
    m = s.machine
    length = (f"{a.rounds} measured stream(s) per worker" if a.rounds
              else f"{a.duration} of measured streams per worker")
    rows, notes, figures = [], [], {}
    for c in a.concurrency:
        for i in range(1, a.repeat + 1):
            d, _, _ = row(s, f"direct-c{c}-{i}", f"{c}, direct #{i}")
            w, wr, wm = row(s, f"weft-c{c}-{i}", f"{c}, through weft #{i}")
            x = s.read_json(f"compare-c{c}-{i}.json")
            ag = x["added_gap_us"]
            at = x.get("added_ttff_us") or {}
            rows += [d, w, [f"{c}, added by weft #{i}", "", "", "", "", "", ag["p50"], ag["p90"],
                            f"**{ag['p99']}**", ag["p999"], ag["max"], at.get("p50"), at.get("p99")]
                     + [""] * 12]
            for p in a.peers_run:
                pr, prr, prm = row(s, f"{p}-c{c}-{i}", f"{c}, through {p} #{i}")
                px = s.read_json(f"compare-{p}-c{c}-{i}.json")
                pag = px["added_gap_us"]
                rows += [pr, [f"{c}, added by {p} #{i}", "", "", "", "", "", pag["p50"],
                              pag["p90"], pag["p99"], pag["p999"], pag["max"],
                              (px.get("added_ttff_us") or {}).get("p50"),
                              (px.get("added_ttff_us") or {}).get("p99")] + [""] * 12]
                wf, pf = per_frame(wm["weft_cpu_s"], wr), per_frame(prm["weft_cpu_s"], prr)
                ratio = rnd(wf / pf, 2) if wf and pf else None
                notes.append(f"{c} streams, pair {i}, {p}: frames lost {px['through_frames_lost']}, "
                             f"added inter-frame p99 {pag['p99']} µs, {pf} µs of CPU per frame "
                             f"(weft {wf}: {ratio}× {p}'s).")
                figures.update({f"c{c} {p} CPU µs/frame": pf, f"c{c} weft ÷ {p} CPU/frame": ratio,
                                f"c{c} {p} added gap p99 µs": pag["p99"]})
            met = x["through_frames_lost"] == 0 and x["through_streams_failed"] == 0
            warn = ("; warnings: " + "; ".join(x["warnings"])) if x.get("warnings") else ""
            notes.append(f"{x['concurrency']} streams, pair {i}: frames lost through weft "
                         f"{x['through_frames_lost']} of {x['through_frames_expected']} (aim 0: "
                         f"{'met' if met else 'missed'}); added inter-frame p99 {ag['p99']} µs = "
                         f"{x['through_gap_us']['p99']} − {x['direct_gap_us']['p99']} (aim ≤ 2000 µs: "
                         f"{'met' if ag['p99'] <= 2000 else 'missed'}){warn}.")
            k = f"c{c}" + (f"#{i}" if a.repeat > 1 else "")
            figures.update({f"{k} frames lost": wr["frames_lost"],
                            f"{k} added gap p50 µs": ag["p50"], f"{k} added gap p99 µs": ag["p99"],
                            f"{k} weft gap p99 µs": x["through_gap_us"]["p99"],
                            f"{k} weft TTFF p50 µs": (wr.get("ttff_us") or {}).get("p50"),
                            f"{k} weft CPU µs/frame": per_frame(wm["weft_cpu_s"], wr)})
    md = [f"## weft streaming benchmark, {m['date']}", "",
          f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up` with an `openai` provider on "
          f"the paced upstream; {', '.join(map(str, a.concurrency))} concurrent streams of "
          f"{a.deltas} deltas {a.gap_ms} ms apart, {length} after {a.warmup_rounds} warm-up "
          f"stream(s); generator {a.gen_threads} thread(s), upstream {a.upstream_threads} "
          f"thread(s); hypervisor steal {m['cpu_steal_pct']}% of CPU time over the benchmark", "",
          f"Times in µs. Gap: between two consecutive deltas of one stream at the client (the "
          f"upstream sends them {a.gap_ms} ms apart). TTFF: request sent → first delta. Lag: how "
          f"much later than first delta + k × gap delta k arrived. CPU in % of one core over the "
          f"run, and per frame: the upstream's (a timer wake-up and one write per frame) and the "
          f"generator's (one read per frame) are the floor of the two halves of what weft does "
          f"per frame on this machine; *server* is weft (or the peer the row goes through); busy and steal: the whole machine (all cores).", "",
          table(["concurrency, run", "streams ok", "frames", "lost", "dup/ooo/bad", "coalesced",
                 "gap p50", "p90", "p99", "p99.9", "max", "TTFF p50", "TTFF p99", "lag p99",
                 "frames/s", "generator CPU", "upstream CPU", "server CPU", "server µs/frame",
                 "generator µs/frame", "upstream µs/frame", "machine busy %", "steal %",
                 "load 1m", "rustc procs"], rows, ["l"] + ["r"] * 23 + ["l"]), ""]
    md += [n + "\n" for n in notes]
    return "\n".join(md), figures
