#!/usr/bin/env python3
"""Static checks of weft's deployment files against the workspace (deploy/check.sh runs them).

  dockerfile   every COPY source exists in the build context and is not excluded by
               .dockerignore; every `COPY --from` names an earlier stage; the binaries of
               WEFT_BINS are [[bin]] targets of the workspace and include every service binary;
               every workspace member, and every path outside a crate that it reads at compile
               time (build.rs, sqlx::migrate!, #[folder]), is copied into the build stage; the
               entrypoint's service words name binaries of the image
  compose FILE the resolved compose file (`docker compose config` output): six services with two
               or more replicas, health checks on their own ports, depends_on conditions (migrate
               completed, infrastructure healthy), the migrate job; every URL a service is given
               reaches, through nginx.conf or directly, the service it names on the port that
               service listens on; every weft command is a binary word or a `weft` subcommand
  env          every WEFT_<SECTION>__<KEY> variable set by docker-compose.yaml (environment and
               secret targets) and by the Helm chart's templates is a key of weft's config
               (shared/config/src/*.rs): an unknown key stops every binary at start

Usage: check_fleet.py dockerfile | compose RESOLVED.yaml | env [RESOLVED.yaml]
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ["gateway", "router", "executor", "substrate", "ingress", "mcp-bridge"]
INFRA = ["postgres", "redis", "nats"]
# The peer a URL setting names (compose service / Helm component).
URL_TARGET = {"router_url": "router", "substrate_url": "substrate", "mcp_bridge_url": "mcp-bridge"}

errors: list[str] = []
notes: list[str] = []


def err(where: str, msg: str) -> None:
    errors.append(f"{where}: {msg}")


def finish(what: str) -> int:
    for n in notes:
        print(f"  {n}")
    for e in errors:
        print(f"  ERROR {e}", file=sys.stderr)
    print(f"check_fleet.py {what}: {'FAILED, ' + str(len(errors)) + ' errors' if errors else 'ok'}")
    return 1 if errors else 0


# --- the workspace --------------------------------------------------------------------------------


def workspace() -> tuple[list[str], dict[str, str]]:
    """(member paths, {bin name: member path})."""
    root = tomllib.loads((ROOT / "Cargo.toml").read_text())
    members = root["workspace"]["members"]
    bins: dict[str, str] = {}
    for m in members:
        manifest = tomllib.loads((ROOT / m / "Cargo.toml").read_text())
        declared = manifest.get("bin", [])
        for b in declared:
            bins[b["name"]] = m
        if not declared and (ROOT / m / "src/main.rs").exists():
            bins[manifest["package"]["name"]] = m
    return members, bins


# --- weft's config keys -----------------------------------------------------------------------------

STRUCT = re.compile(r"^pub struct (\w+)\s*\{(.*?)^\}", re.S | re.M)
FIELD = re.compile(r"^\s*pub (\w+):\s*([^\n]+?),?\s*$", re.M)


def config_schema() -> dict[str, dict[str, str]]:
    # One module per section (shared/config/src/<section>.rs); read them all.
    src = "\n".join(p.read_text() for p in sorted((ROOT / "shared/config/src").glob("*.rs")))
    return {m.group(1): dict(FIELD.findall(m.group(2))) for m in STRUCT.finditer(src)}


def check_env_name(name: str, schema: dict[str, dict[str, str]], where: str) -> None:
    """An unknown key stops every weft binary (deny_unknown_fields); names are lowercased."""
    if not name.startswith("WEFT_") or "__" not in name:
        return  # not config (figment reads only WEFT_ names with `__`)
    parts = name[len("WEFT_") :].lower().split("__")
    struct = "Config"
    for i, part in enumerate(parts):
        fields = schema.get(struct)
        if fields is None:
            return
        if part not in fields:
            err(where, f"{name}: `{'.'.join(parts[: i + 1])}` is not a key of weft's config "
                f"(shared/config/src {struct}); every binary would refuse to start")
            return
        ty = re.sub(r"^Option<(.*)>$", r"\1", fields[part].strip())
        if ty.startswith(("BTreeMap<", "HashMap<")):
            return  # user-named keys below
        if ty in schema:
            struct = ty
            continue
        if i != len(parts) - 1:
            err(where, f"{name}: `{'.'.join(parts[: i + 1])}` is a value ({ty}), it has no sub-keys")
        return
    # Every step named a struct: the variable would replace a whole section with a string.
    err(where, f"{name}: `{'.'.join(parts)}` is a section ({struct}), not a value")


# --- .dockerignore ----------------------------------------------------------------------------------


def dockerignore() -> list[tuple[bool, str]]:
    path = ROOT / ".dockerignore"
    rules = []
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = line[1:] if neg else line
        rules.append((neg, pat.strip("/")))
    return rules


def _match(pattern: str, path: str) -> bool:
    """Docker's pattern match: filepath.Match per segment, `**` any number of segments; a
    pattern that matches a folder excludes what is under it."""
    pseg, sseg = pattern.split("/"), path.split("/")

    def rec(i: int, j: int) -> bool:
        if i == len(pseg):
            return True  # the pattern matched a parent folder: everything under it goes too
        if pseg[i] == "**":
            return any(rec(i + 1, k) for k in range(j, len(sseg) + 1))
        if j == len(sseg):
            return False
        return fnmatch.fnmatchcase(sseg[j], pseg[i]) and rec(i + 1, j + 1)

    return rec(0, 0)


def ignored(path: str, rules: list[tuple[bool, str]]) -> bool:
    out = False
    for neg, pat in rules:
        if _match(pat, path):
            out = not neg
    return out


# --- the Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        if not buf:
            start = n
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def check_dockerfile() -> int:
    path = ROOT / "Dockerfile"
    members, bins = workspace()
    rules = dockerignore()
    instrs = dockerfile_instructions(path.read_text())
    stages: list[str] = []
    copied: dict[str, list[str]] = {}  # stage -> destinations covered (relative to /src)
    stage_of_build = None
    args: dict[str, str] = {}
    workdir: dict[str, str] = {}
    for line, ins, rest in instrs:
        where = f"Dockerfile:{line}"
        if ins == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            name = (m.group(2) if m and m.group(2) else str(len(stages))).lower()
            stages.append(name)
            copied[name] = []
            workdir[name] = "/"
            continue
        stage = stages[-1] if stages else "?"
        if ins == "ARG":
            k, _, v = rest.partition("=")
            args[k.strip()] = v.strip().strip('"')
        elif ins == "WORKDIR":
            workdir[stage] = rest
        elif ins in ("COPY", "ADD"):
            if rest.startswith("["):
                parts = yaml.safe_load(rest)
            else:
                parts = shlex.split(rest)
            flags = [p for p in parts if p.startswith("--")]
            paths = [p for p in parts if not p.startswith("--")]
            if len(paths) < 2:
                err(where, f"{ins} needs a source and a destination")
                continue
            srcs, dest = paths[:-1], paths[-1]
            src_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            if src_stage is not None:
                if src_stage.lower() not in stages[:-1] and not re.search(r"[:/]", src_stage):
                    err(where, f"COPY --from={src_stage}: no earlier stage of that name")
            else:
                for s in srcs:
                    hits = glob.glob(str(ROOT / s))
                    if not hits:
                        err(where, f"COPY source {s} does not exist in the build context")
                    elif ignored(s.rstrip("/"), rules):
                        err(where, f"COPY source {s} is excluded by .dockerignore")
            base = workdir[stage].rstrip("/") or ""
            d = os.path.normpath(dest if dest.startswith("/") else f"{base}/{dest}")
            for s in srcs:
                is_dir = s.endswith("/") or (src_stage is None and (ROOT / s).is_dir())
                if is_dir:
                    copied[stage].append(d)  # a folder's contents land in dest
                elif dest.endswith("/") or len(srcs) > 1:
                    copied[stage].append(os.path.normpath(f"{d}/{os.path.basename(s)}"))
                else:
                    copied[stage].append(d)
        elif ins == "RUN" and "cargo build" in rest:
            stage_of_build = stage
            if "--locked" not in rest:
                err(where, "cargo build without --locked")
            if "--release" not in rest:
                err(where, "cargo build without --release")
    # The binaries.
    want = args.get("WEFT_BINS", "").split()
    if not want:
        err("Dockerfile", "no ARG WEFT_BINS naming the binaries of the image")
    for b in want:
        if b not in bins:
            err("Dockerfile", f"WEFT_BINS: {b} is not a [[bin]] of the workspace ({', '.join(sorted(bins))})")
    service_bins = sorted(b for b, m in bins.items() if m.startswith("services/"))
    for b in service_bins:
        if b not in want:
            err("Dockerfile", f"WEFT_BINS lacks {b}, a [[bin]] of {bins[b]}")
    # What cargo reads in the build stage.
    if stage_of_build is None:
        err("Dockerfile", "no stage runs cargo build")
    else:
        base = workdir[stage_of_build].rstrip("/")
        have = [c[len(base) + 1 :] if c.startswith(base + "/") else c for c in copied[stage_of_build]]

        def covered(rel: str) -> bool:
            return any(rel == h or rel.startswith(h + "/") for h in have)

        for m in members:
            if not covered(m):
                err("Dockerfile", f"workspace member {m} is not copied into the `{stage_of_build}` stage; cargo cannot load the workspace without it")
        for rel in compile_time_paths(members):
            if not covered(rel):
                err("Dockerfile", f"{rel}, read at compile time, is not copied into the `{stage_of_build}` stage")
        for f in ("Cargo.toml", "Cargo.lock"):
            if not covered(f):
                err("Dockerfile", f"{f} is not copied into the `{stage_of_build}` stage")
    # The entrypoint's words.
    ep = ROOT / "deploy/docker/entrypoint.sh"
    words = entrypoint_words(ep)
    for w in words:
        if f"weft-{w}" not in want:
            err(str(ep.relative_to(ROOT)), f"service word {w} runs weft-{w}, which the image does not ship")
    for b in want:
        if b.startswith("weft-") and b[5:] not in words and b[5:] in SERVICES:
            err(str(ep.relative_to(ROOT)), f"{b} ships in the image but the entrypoint has no word for it")
    notes.append(f"Dockerfile: {len(stages)} stages, {len(want)} binaries ({' '.join(want)}), "
                 f"{len(members)} workspace members and their compile-time paths copied, "
                 f"entrypoint words {' '.join(words)}")
    return finish("dockerfile")


def entrypoint_words(ep: Path) -> list[str]:
    m = re.search(r"^\s*(gateway[^)]*)\)", ep.read_text(), re.M)
    return [w.strip() for w in m.group(1).split("|")] if m else []


def compile_time_paths(members: list[str]) -> set[str]:
    """Paths outside their crate that crates read while compiling, relative to the root: proto
    files (build.rs), migrations (sqlx::migrate!), the UI (#[folder]), include_str!/include_bytes!.
    `rerun-if-changed` lines are only rebuild triggers and are left out."""
    out: set[str] = set()
    manifest_rel = re.compile(r'(?:migrate!\(\s*|#\[folder\s*=\s*|Path::new\(\s*|\.join\(\s*)"(\.\./[^"]+)"')
    file_rel = re.compile(r'include_(?:str|bytes)!\(\s*"([^"]+)"')
    for m in members:
        crate = ROOT / m
        files = [crate / "build.rs"] + sorted((crate / "src").rglob("*.rs"))
        for f in files:
            if not f.exists():
                continue
            text = f.read_text()
            hits = [(crate / h) for h in manifest_rel.findall(text)]
            hits += [(f.parent / h) for h in file_rel.findall(text)]
            for p in hits:
                try:
                    rel = str(p.resolve().relative_to(ROOT))
                except ValueError:
                    continue
                if not (rel + "/").startswith(m + "/"):
                    out.add(rel.rstrip("/"))
    return out


# --- nginx.conf --------------------------------------------------------------------------------------


def nginx(path: Path) -> tuple[dict[str, list[tuple[str, int]]], list[dict]]:
    """(upstream name -> [(host, port)], servers [{listen, http2, passes: [(kind, upstream)]}])."""
    text = re.sub(r"#[^\n]*", "", path.read_text())
    toks = re.findall(r"[{};]|[^\s{};]+", text)
    upstreams: dict[str, list[tuple[str, int]]] = {}
    servers: list[dict] = []
    stack: list[tuple[str, list[str]]] = []
    stmt: list[str] = []
    for t in toks:
        if t == "{":
            stack.append((stmt[0] if stmt else "", stmt[1:]))
            if stmt and stmt[0] == "upstream":
                upstreams[stmt[1]] = []
            if stmt and stmt[0] == "server" and len(stack) >= 1 and stack[-2:-1] and stack[-2][0] == "http":
                servers.append({"listen": None, "http2": False, "passes": []})
            stmt = []
        elif t == "}":
            stack.pop()
            stmt = []
        elif t == ";":
            ctx = [s[0] for s in stack]
            if stmt and ctx[-1:] == ["upstream"] and stmt[0] == "server":
                host, _, port = stmt[1].partition(":")
                upstreams[stack[-1][1][0]].append((host, int(port or 80)))
            elif stmt and "server" in ctx and servers:
                srv = servers[-1]
                if stmt[0] == "listen":
                    srv["listen"] = int(stmt[1].rsplit(":", 1)[-1])
                    srv["http2"] |= "http2" in stmt
                elif stmt[:2] == ["http2", "on"]:
                    srv["http2"] = True
                elif stmt[0] in ("proxy_pass", "grpc_pass"):
                    m = re.match(r"(\w+)://([^/:]+)", stmt[1])
                    if m:
                        srv["passes"].append((stmt[0], m.group(1), m.group(2)))
            stmt = []
        else:
            stmt.append(t)
    return upstreams, servers


# --- compose ------------------------------------------------------------------------------------------

SECTION = {"gateway": "gateway", "router": "router", "executor": "executor",
           "substrate": "substrate", "ingress": "ingress", "mcp-bridge": "mcp_bridge"}


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: str(v) for k, v in env.items()}


def _port(addr: str) -> int | None:
    m = re.search(r":(\d+)$", addr or "")
    return int(m.group(1)) if m else None


def weft_subcommands() -> set[str]:
    src = (ROOT / "services/weft/src/main.rs").read_text()
    body = re.search(r"enum Cmd \{(.*?)^\}", src, re.S | re.M)
    names = re.findall(r"^\s{4}(\w+)(?:\(|,)", body.group(1), re.M) if body else []
    return {re.sub(r"(?<!^)([A-Z])", r"-\1", n).lower() for n in names}


def check_compose(resolved: Path) -> int:
    doc = yaml.safe_load(resolved.read_text())
    services = doc.get("services", {})
    nginx_conf = ROOT / "deploy/compose/nginx.conf"
    upstreams, servers = nginx(nginx_conf)
    words = entrypoint_words(ROOT / "deploy/docker/entrypoint.sh")
    subcommands = weft_subcommands()
    image = None
    for name in SERVICES + INFRA + ["migrate", "lb"]:
        if name not in services:
            err("docker-compose.yaml", f"no service `{name}`")
    if errors:
        return finish("compose")
    image = services["gateway"].get("image")
    # Listen and metrics ports of the fleet, from each service's own environment.
    listen: dict[str, int | None] = {}
    metrics: dict[str, int | None] = {}
    for name in SERVICES:
        svc = services[name]
        where = f"docker-compose.yaml services.{name}"
        env = _env(svc)
        sec = SECTION[name].upper()
        listen[name] = _port(env.get(f"WEFT_{sec}__LISTEN", ""))
        metrics[name] = _port(env.get(f"WEFT_{sec}__METRICS_LISTEN", ""))
        if name != "executor" and listen[name] is None:
            err(where, f"WEFT_{sec}__LISTEN is not set to HOST:PORT (the default listens on 127.0.0.1 only)")
        replicas = int((svc.get("deploy") or {}).get("replicas", svc.get("scale", 1)))
        if replicas < 2:
            err(where, f"{replicas} replica(s); the deployment runs two or more of each service")
        if svc.get("image") != image:
            err(where, f"image {svc.get('image')} differs from the gateway's {image}")
        cmd = svc.get("command") or []
        cmd = shlex.split(cmd) if isinstance(cmd, str) else cmd
        if not cmd or cmd[0] != name or name not in words:
            err(where, f"command {cmd} should start with `{name}`, the entrypoint's word for weft-{name}")
        deps = svc.get("depends_on") or {}
        if (deps.get("migrate") or {}).get("condition") != "service_completed_successfully":
            err(where, "depends_on.migrate.condition must be service_completed_successfully")
        for infra in INFRA:
            if (deps.get(infra) or {}).get("condition") != "service_healthy":
                err(where, f"depends_on.{infra}.condition must be service_healthy")
        hc = svc.get("healthcheck") or {}
        test = " ".join(hc.get("test") or [])
        if not test or hc.get("disable"):
            err(where, "no healthcheck")
        else:
            ports = {int(p) for p in re.findall(r"127\.0\.0\.1[:/](\d+)", test)}
            own = {listen[name], metrics[name]} - {None}
            if not ports or not ports <= own:
                err(where, f"healthcheck probes port(s) {sorted(ports)}, not the service's own {sorted(own)}")
        if env.get("WEFT_DATABASE__MIGRATE_ON_START", "").lower() != "false":
            notes.append(f"services.{name}: migrates at start as well as in the migrate job")
    for name in INFRA:
        if not (services[name].get("healthcheck") or {}).get("test"):
            err(f"docker-compose.yaml services.{name}", "no healthcheck (the fleet waits for service_healthy)")
    mig = services["migrate"]
    mcmd = mig.get("command") or []
    if (shlex.split(mcmd) if isinstance(mcmd, str) else mcmd)[:1] != ["migrate"]:
        err("docker-compose.yaml services.migrate", "command must be [migrate] (`weft migrate`)")
    if "migrate" not in subcommands:
        err("services/weft/src/main.rs", "`weft migrate` is not a subcommand any more")
    for name, svc in services.items():
        cmd = svc.get("command") or []
        if svc.get("image") == image and name not in SERVICES and cmd:
            first = (shlex.split(cmd) if isinstance(cmd, str) else cmd)[0]
            if first not in subcommands and first not in words and not first.startswith("-"):
                err(f"docker-compose.yaml services.{name}", f"`{first}` is neither a service word nor a weft subcommand ({', '.join(sorted(subcommands))})")
    # nginx: upstreams point at compose services on the ports they listen on.
    for up, members in upstreams.items():
        for host, port in members:
            if host not in services:
                err(f"{nginx_conf.relative_to(ROOT)} upstream {up}", f"server {host} is not a compose service")
            elif host in listen and listen[host] != port:
                err(f"{nginx_conf.relative_to(ROOT)} upstream {up}", f"{host}:{port}, but {host} listens on {listen[host]}")
    by_listen = {s["listen"]: s for s in servers}
    for s in servers:
        for kind, scheme, target in s["passes"]:
            if target not in upstreams:
                err(str(nginx_conf.relative_to(ROOT)), f"{kind} to {target}, which is no upstream")
            if kind == "grpc_pass" and not s["http2"]:
                err(str(nginx_conf.relative_to(ROOT)), f"server on {s['listen']} passes gRPC but has no `http2 on` (clients speak HTTP/2 with prior knowledge)")

    def reaches(url: str) -> set[str]:
        """The compose services a URL lands on (through the load balancer or directly)."""
        m = re.match(r"\w+://([^/:]+):(\d+)", url)
        if not m:
            return set()
        host, port = m.group(1), int(m.group(2))
        if host == "lb":
            srv = by_listen.get(port)
            if not srv:
                return set()
            return {h for _, _, up in srv["passes"] for h, p in upstreams.get(up, []) if listen.get(h) == p}
        return {host} if listen.get(host) == port else set()

    wired = 0
    for name in SERVICES:
        env = _env(services[name])
        for key, value in env.items():
            if not key.endswith("_URL") or "__" not in key:
                continue
            setting = key.split("__", 1)[1].lower()
            target = URL_TARGET.get(setting)
            if not target:
                continue
            got = reaches(value)
            wired += 1
            if got != {target}:
                err(f"docker-compose.yaml services.{name}", f"{key}={value} reaches {sorted(got) or 'nothing'}, not {target}")
    lb = services["lb"]
    published = [p for p in lb.get("ports") or []]
    http_servers = [s for s in servers if any(k == "proxy_pass" for k, _, _ in s["passes"])]
    targets = set()
    for p in published:  # "HOST:PUBLISHED:TARGET[/tcp]" (compose 1.x) or {target: ...} (v2)
        t = p.get("target") if isinstance(p, dict) else str(p).rsplit(":", 1)[-1].split("/")[0]
        if t:
            targets.add(int(t))
    for s in http_servers:
        if s["listen"] not in targets:
            err("docker-compose.yaml services.lb", f"the HTTP server on {s['listen']} is not published")
    if "gateway" not in {h for s in http_servers for _, _, up in s["passes"] for h, _ in upstreams.get(up, [])}:
        err(str(nginx_conf.relative_to(ROOT)), "no HTTP server proxies to the gateway")
    notes.append(
        f"compose: {len(SERVICES)} services x {', '.join(str(int((services[n].get('deploy') or {}).get('replicas', 1))) for n in SERVICES)} replicas, "
        f"{wired} peer URLs traced through nginx to the right service and port, "
        f"{len(upstreams)} upstreams, health checks on own ports, depends_on conditions ok"
    )
    return finish("compose")


# --- env names ------------------------------------------------------------------------------------------


def check_env(resolved: Path | None) -> int:
    schema = config_schema()
    if "Config" not in schema:
        err("shared/config/src", "no `pub struct Config` found; the env check cannot run")
        return finish("env")
    count = 0
    if resolved is not None:
        doc = yaml.safe_load(resolved.read_text())
        for name, svc in (doc.get("services") or {}).items():
            for key in _env(svc):
                check_env_name(key, schema, f"docker-compose.yaml services.{name}")
                count += 1
            for sec in svc.get("secrets") or []:
                if isinstance(sec, dict) and sec.get("target"):
                    check_env_name(sec["target"], schema, f"docker-compose.yaml services.{name} secret")
                    count += 1
    chart = ROOT / "deploy/helm/weft"
    for tpl in sorted((chart / "templates").glob("*")):
        for key in set(re.findall(r"\bWEFT_[A-Z0-9_]+__[A-Z0-9_]+\b", tpl.read_text())):
            check_env_name(key, schema, str(tpl.relative_to(ROOT)))
            count += 1
    # The names the chart builds from its services map: WEFT_<snakecase key>__LISTEN/METRICS_LISTEN.
    values = yaml.safe_load((chart / "values.yaml").read_text())
    for key, svc in (values.get("services") or {}).items():
        sec = re.sub(r"(?<!^)([A-Z])", r"_\1", key).upper()
        for suffix, on in (("LISTEN", svc.get("port")), ("METRICS_LISTEN", svc.get("metricsPort"))):
            if on:
                check_env_name(f"WEFT_{sec}__{suffix}", schema, f"deploy/helm/weft/values.yaml services.{key}")
                count += 1
        word = re.sub(r"(?<!^)([A-Z])", r"-\1", key).lower()
        if word not in entrypoint_words(ROOT / "deploy/docker/entrypoint.sh"):
            err(f"deploy/helm/weft/values.yaml services.{key}", f"the image has no word `{word}` (deploy/docker/entrypoint.sh)")
    notes.append(f"env: {count} WEFT_ variable names checked against {len(schema)} config structs")
    return finish("env")


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("dockerfile", "compose", "env"):
        print(__doc__, file=sys.stderr)
        return 2
    what = sys.argv[1]
    if what == "dockerfile":
        return check_dockerfile()
    if what == "compose":
        if len(sys.argv) != 3:
            print("usage: check_fleet.py compose RESOLVED.yaml", file=sys.stderr)
            return 2
        return check_compose(Path(sys.argv[2]))
    return check_env(Path(sys.argv[2]) if len(sys.argv) > 2 else None)


if __name__ == "__main__":
    sys.exit(main())
