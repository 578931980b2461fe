"""The command line: `python3 loadtest/bench.py SCENARIO [options]`, one shape for every
scenario, and the same-sitting A/B mode (`--base-bin`)."""

import argparse
import datetime
import importlib
import re
import shutil
import signal
import statistics
import sys
from pathlib import Path

from . import common
from .common import BenchError, ROOT, duration, log, table
from .sitting import Sitting

SCENARIOS = ["chat", "runs", "streams", "channels", "memory", "schedules", "webhooks", "mcp",
             "volumes", "plans"]
SERVER_BINARIES = {"weft": "weft", "weft-gateway": "weft-gateway",
                   "weft-mcp-bridge": "weft-mcp-bridge"}

DESCRIPTION = """\
Runs one of weft's benchmark scenarios on fresh ground (its own database, ports, config,
NATS/Redis prefixes and fleet, all torn down at the end, also on Ctrl-C), writes the raw reports
and logs to --out and prints a markdown summary (also written as summary.md there).

With --base-bin, measures the base build and the candidate alternately (base, candidate, base,
candidate, … --pairs times), each on an identical fresh setup, and prints each figure's
ratio candidate/base.

The runner does not build: build the release binaries first (it prints the command when they
are missing). The load generator always comes from --bin.
"""


def scenario_module(name):
    return importlib.import_module(f".scenarios.{name}", __package__)


def common_args(p, mod):
    g = p.add_argument_group("common options")
    g.add_argument("--bin", type=Path, default=ROOT / "target" / "release",
                   help="the release binaries: weft, weft-loadtest, … (default target/release)")
    g.add_argument("--base-bin", type=Path,
                   help="A/B: the base build's binaries, measured alternately with --bin")
    g.add_argument("--pairs", type=int, default=2, help="A/B: base/candidate pairs (default 2)")
    g.add_argument("--duration", type=duration, default=getattr(mod, "DURATION", "10s"),
                   help="measured time per run (default %(default)s)")
    g.add_argument("--warmup", type=duration, default="2s", help="warm-up per run (default %(default)s)")
    g.add_argument("--gen-threads", type=int, default=1,
                   help="the load generator's runtime threads (default 1)")
    g.add_argument("--private-infra", choices=["auto", "on", "off"], default="auto",
                   help="a NATS and a Redis server of the sitting's own (auto: when installed; "
                        "off: the machine's at 127.0.0.1:4222/6379)")
    g.add_argument("--out", type=Path,
                   help="raw reports, logs and summary.md (default "
                        "target/loadtest/<date>/<scenario>/)")


def parser():
    p = argparse.ArgumentParser(prog="loadtest/bench.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for name in SCENARIOS:
        mod = scenario_module(name)
        sp = sub.add_parser(name, help=mod.HELP, description=mod.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        common_args(sp, mod)
        mod.add_args(sp.add_argument_group(f"{name} options"))
    return p


def needed(mod, args):
    return mod.binaries(args) if hasattr(mod, "binaries") else mod.BINARIES


def check_binaries(mod, args):
    missing = []
    lt = args.bin / "weft-loadtest"
    if not lt.exists():
        missing.append(lt)
    for d in [args.bin] + ([args.base_bin] if args.base_bin else []):
        missing += [d / b for b in needed(mod, args) if not (d / b).exists()]
    if missing:
        pkgs = ["weft-loadtest"] + needed(mod, args)
        cmds = "\n".join(f"  cargo build --release --locked -p {p}" for p in pkgs)
        raise BenchError("missing: " + ", ".join(map(str, missing)) + "\nbuild them with (one "
                         "package per invocation, so features are not unified):\n" + cmds)


def tail_logs(out):
    logs = sorted((out / "logs").glob("*.log")) if (out / "logs").exists() else []
    for f in [f for f in logs if not f.name.startswith(("nats-", "redis-", "perf"))]:
        lines = [l for l in f.read_text(errors="replace").splitlines() if "token" not in l.lower()]
        if lines:
            log(f"last lines of {f} (token lines left out):")
            for l in lines[-15:]:
                print("    " + l, file=sys.stderr)


def sitting(mod, args, bin_dir, out, label):
    with Sitting(args, bin_dir, args.bin / "weft-loadtest", out, label) as s:
        try:
            markdown, figures = mod.run(s)
        except BaseException:
            tail_logs(out)
            raise
        machine = dict(s.machine, scenario=args.scenario, label=label, bin=str(bin_dir),
                       options={k: (v if isinstance(v, (int, float, str, list, type(None)))
                                    else str(v)) for k, v in vars(args).items()})
    common.write_json(out / "machine.json", machine)
    common.write_json(out / "figures.json", figures)
    (out / "summary.md").write_text(markdown)
    return markdown, figures


def ratio_table(runs, pairs):
    """Each figure: base and candidate values per pair, and candidate/base (of the means, and
    per pair)."""
    keys = list(dict.fromkeys(k for side in ("base", "candidate") for f in runs[side] for k in f))
    rows = []
    for k in keys:
        b = [f.get(k) for f in runs["base"]]
        c = [f.get(k) for f in runs["candidate"]]
        bs, cs = [x for x in b if x is not None], [x for x in c if x is not None]
        mean_ratio = None
        if bs and cs and statistics.mean(bs) != 0:
            mean_ratio = round(statistics.mean(cs) / statistics.mean(bs), 3)
        per = [round(y / x, 3) if x not in (None, 0) and y is not None else None
               for x, y in zip(b, c)]
        rows.append([k, ", ".join(common.cell(x) for x in b), ", ".join(common.cell(x) for x in c),
                     mean_ratio, ", ".join(common.cell(x) for x in per)])
    return table(["figure", "base", "candidate", "candidate/base (means)", "per pair"], rows,
                 ["l", "r", "r", "r", "r"])


def main(argv=None):
    args = parser().parse_args(argv)
    mod = scenario_module(args.scenario)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    if args.out is None:
        args.out = ROOT / "target" / "loadtest" / date / args.scenario
        if args.out.exists():
            shutil.rmtree(args.out)
    args.out = args.out.resolve()
    args.bin = args.bin.resolve()
    if args.base_bin:
        args.base_bin = args.base_bin.resolve()

    def term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, term)
    try:
        check_binaries(mod, args)
        if common.compiler_running():
            log("warning: a compiler is running on this machine; the numbers will be noisy")
        if not args.base_bin:
            markdown, _ = sitting(mod, args, args.bin, args.out, "")
        else:
            runs = {"base": [], "candidate": []}
            parts = []
            for i in range(1, args.pairs + 1):
                for side, d in (("base", args.base_bin), ("candidate", args.bin)):
                    log(f"pair {i}: {side} ({d})")
                    md, fig = sitting(mod, args, d, args.out / f"{side}-{i}", f"{side} {i}")
                    runs[side].append(fig)
                    parts.append(f"### {side} {i} (`{d}`)\n\n" + re.sub(r"(?m)^## ", "#### ", md))
            markdown = (f"## {args.scenario}: candidate/base, {args.pairs} pair(s) in one sitting, "
                        f"{date}\n\nbase `{args.base_bin}`, candidate `{args.bin}`; order base, "
                        f"candidate, … (each on a fresh setup). A ratio above 1 is a bigger figure "
                        f"for the candidate: slower for latencies and CPU, faster for rates.\n\n"
                        + ratio_table(runs, args.pairs) + "\n\n" + "\n".join(parts))
            (args.out / "summary.md").write_text(markdown)
            common.write_json(args.out / "figures.json", runs)
    except BenchError as e:
        log(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        log("interrupted; everything started was stopped")
        return 130
    print(markdown)
    log(f"reports in {args.out}")
    return 0
