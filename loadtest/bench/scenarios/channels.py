"""`channels`: publishers and long-polling readers on weft's channels at each rate, with
publish and delivery latency and CPU per delivered message (weft's, and the whole machine's)."""

import time

from ..common import int_list, log, mock_config, table

HELP = "channels: publishers and long-polling readers at each rate"
DURATION = "10s"
BINARIES = ["weft"]

CONFIG = mock_config()


def add_args(p):
    p.add_argument("--rates", type=int_list, default=[500, 1000, 2000],
                   help="messages/s, one run each (default 500,1000,2000)")
    p.add_argument("--publishers", type=int, default=4)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--wait-ms", type=int, default=5000, help="the readers' long poll")


def run(s):
    a = s.args
    fleet = s.fleet(CONFIG)
    pids = s.server_pids(fleet)
    log(f"weft at {fleet.url} (pids {pids})")
    rows, figures = [], {}
    for rate in a.rates:
        name = f"channels-r{rate}-p{a.publishers}-m{a.readers}-c{a.channels}"
        r = s.loadtest("channels", "--url", fleet.url, "--rate", rate, "--publishers",
                       a.publishers, "--readers", a.readers, "--channels", a.channels,
                       "--prefix", f"r{rate}", "--wait-ms", a.wait_ms, "--duration", a.duration,
                       "--warmup", a.warmup, "--threads", a.gen_threads,
                       *[x for p in pids[:1] for x in ("--server-pid", p)],
                       out=s.out / f"{name}.json", env={"WEFT_LOADTEST_TOKEN": fleet.token})
        pl, dl = r["publish_latency"], r["delivery_latency"]
        rows.append([rate, r["publish_rate_per_s"], r["delivery_rate_per_s"], r["ops_per_s"],
                     f"{pl['p50_us'] / 1000:g} / {pl['p99_us'] / 1000:g} ms",
                     f"{dl['p50_us'] / 1000:g} / {dl['p99_us'] / 1000:g} / {dl['max_us'] / 1000:g} ms",
                     f"{r['server_cpu_ms_per_message']} ms", f"{r['machine_cpu_ms_per_message']} ms",
                     " ".join(f"{k}={v}" for k, v in (r.get("failures") or {}).items())])
        figures.update({f"r{rate} delivered/s": r["delivery_rate_per_s"],
                        f"r{rate} publish p99 µs": pl["p99_us"],
                        f"r{rate} delivery p50 µs": dl["p50_us"],
                        f"r{rate} delivery p99 µs": dl["p99_us"],
                        f"r{rate} weft CPU ms/msg": r["server_cpu_ms_per_message"],
                        f"r{rate} machine CPU ms/msg": r["machine_cpu_ms_per_message"]})
        time.sleep(1)
    m = s.machine
    md = "\n".join([
        f"## weft channels benchmark, {m['date']}", "",
        f"{m['cpu']}, {m['cores']} cores, git {m['git']}; `weft up`; {a.publishers} publishers, "
        f"{a.readers} readers over {a.channels} channels, long poll {a.wait_ms} ms; {a.duration} "
        f"per rate after {a.warmup} warm-up; hypervisor steal {m['cpu_steal_pct']}%", "",
        table(["msgs/s asked", "published/s", "delivered/s", "ops/s", "publish p50 / p99",
               "publish→delivery p50 / p99 / max", "weft CPU / msg", "machine CPU / msg",
               "failures"], rows, ["r"] * 8 + ["l"])])
    return md + "\n", figures
