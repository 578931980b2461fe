#!/usr/bin/env python3
"""Lint and render the weft chart with Helm's own Go SDK, where the `helm` CLI is missing.

helm-python-sdk (PyPI) ships libhelm_c, a C ABI over Helm's official Go SDK (v4.2.3 in 0.2.2),
so this is Helm's real template engine and linter, offline. deploy/check.sh installs it, pinned
by hash (deploy/helm/requirements-render.txt), into target/deploy-check-venv and runs this file
there; without it the chart is only checked statically (lint.py).

For each value set below: `helm lint --strict` (warnings fail), then `helm template`, and on the
manifests: every document parses and has apiVersion, kind and metadata.name; no two share a
kind and name; names fit Kubernetes' limits; each Deployment's selector matches its pods; each
Service, PodDisruptionBudget and HorizontalPodAutoscaler selects or targets a Deployment of the
release; probes and Service targetPorts name ports the container declares; Ingress backends name
a Service and a port it has; every ConfigMap referenced is rendered and every Secret referenced is
secrets.existingSecret; the migration Job is a pre-install/pre-upgrade hook; every WEFT_ variable
(container env, ConfigMap data) is a key of weft's config (check_fleet.py's check); and, when
kubernetes-validate is installed, every manifest is valid (strict: no unknown fields) against
Kubernetes' schemas for the oldest version the chart supports (Chart.yaml kubeVersion) and the
newest the package knows.

Usage: render.py [CHART_DIR]   (exit 1 on any finding, 3 when helm_python is not importable)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import check_fleet  # noqa: E402  (deploy/check_fleet.py: weft's config keys)

try:
    import helm_python as helm
except ImportError:
    print("render.py: helm_python (pip install helm-python-sdk) is not importable", file=sys.stderr)
    sys.exit(3)
try:  # Kubernetes' OpenAPI schemas, per version (optional: pip install kubernetes-validate)
    import kubernetes_validate
except ImportError:
    kubernetes_validate = None

VALUE_SETS: dict[str, dict] = {
    "defaults": {},
    "everything on": {
        "fullnameOverride": "weft-production-fleet-in-a-long-namespace-name-x",
        "ingress": {"enabled": True, "className": "nginx", "host": "weft.example.com",
                    "tlsSecretName": "weft-tls", "annotations": {"a": "b"}},
        "secrets": {"keys": {"redisUrl": "redis-url"}},
        "config": '[router.providers.openai]\nkind = "openai"\nbase_url = "https://api.openai.com/v1"\napi_key_env = "OPENAI_API_KEY"\n',
        "extraEnv": [{"name": "OPENAI_API_KEY",
                      "valueFrom": {"secretKeyRef": {"name": "weft-secrets", "key": "openai"}}}],
        "telemetry": {"otlpEndpoint": "http://otel:4317"},
        "imagePullSecrets": [{"name": "regcred"}],
        "podAnnotations": {"prometheus.io/scrape": "true"},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "services": {k: {"autoscaling": {"enabled": True}, "env": {"WEFT_TELEMETRY__LOG_LEVEL": "debug"}}
                     for k in ("gateway", "router", "executor", "substrate", "ingress", "mcpBridge")},
    },
    "minimal": {
        "migration": {"enabled": False},
        "serviceAccount": {"create": False},
        "spreadAcrossNodes": False,
        "services": {"mcpBridge": {"enabled": False}, "ingress": {"enabled": False,
                     "pdb": {"enabled": False}}},
    },
}

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas.
KUBE_VERSIONS: list[str] = []

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_set(chart: Path, label: str, values: dict, schema: dict, errors: list[str]) -> int:
    def err(msg: str) -> None:
        errors.append(f"[{label}] {msg}")

    report = helm.chart.lint(str(chart), values or None, strict=True)
    for m in report.get("messages", []):
        if m.get("severity", 0) >= 2:
            err(f"helm lint: {m.get('path')}: {m.get('error')}")
    for e in report.get("errors", []):
        err(f"helm lint: {e}")
    with helm.Chart.load(str(chart)) as c:
        try:
            out = c.render(values or None, name="weft", namespace="weft", is_install=True)
        except helm.HelmError as e:  # type: ignore[attr-defined]
            err(f"helm template: {e}")
            return 0
    docs: list[dict] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            for d in yaml.safe_load_all(text):
                if d is not None:
                    d["__file"] = path
                    docs.append(d)
        except yaml.YAMLError as e:
            err(f"{path}: rendered YAML does not parse: {e}")
    seen: set[tuple[str, str]] = set()
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        kind, name = d.get("kind"), (d.get("metadata") or {}).get("name")
        if not (d.get("apiVersion") and kind and name):
            err(f"{d['__file']}: a document without apiVersion, kind or metadata.name")
            continue
        if (kind, name) in seen:
            err(f"{d['__file']}: {kind} {name} is rendered twice")
        seen.add((kind, name))
        limit = 63 if kind in ("Service", "Deployment", "Job") else 253
        if len(name) > limit or (kind == "Service" and not DNS_LABEL.match(name)):
            err(f"{d['__file']}: {kind} name {name!r} is not a valid name of at most {limit} characters")
        by_kind.setdefault(kind, []).append(d)
    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    services = {d["metadata"]["name"]: d for d in by_kind.get("Service", [])}
    merged = helm.Chart.load(str(chart)).merge_values(values or None)
    secret = merged["secrets"]["existingSecret"]

    def pod_labels(dep: dict) -> dict:
        return ((dep["spec"]["template"].get("metadata") or {}).get("labels")) or {}

    def selects(sel: dict, labels: dict) -> bool:
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())

    def containers(obj: dict) -> list[dict]:
        return obj["spec"]["template"]["spec"].get("containers", [])

    for name, dep in deployments.items():
        sel = dep["spec"]["selector"]["matchLabels"]
        if not selects(sel, pod_labels(dep)):
            err(f"Deployment {name}: selector {sel} does not match its pod labels")
        others = [n for n, o in deployments.items() if n != name and selects(sel, pod_labels(o))]
        if others:
            err(f"Deployment {name}: its selector also matches the pods of {others}")
    for kind in ("Deployment", "Job"):
        for obj in by_kind.get(kind, []):
            name = obj["metadata"]["name"]
            for c in containers(obj):
                ports = {p.get("name") for p in c.get("ports", [])}
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    p = c.get(probe) or {}
                    for k in ("httpGet", "tcpSocket", "grpc"):
                        port = (p.get(k) or {}).get("port")
                        if isinstance(port, str) and port not in ports:
                            err(f"{kind} {name}: {probe} uses port {port!r}, not one of {sorted(ports - {None})}")
                for ef in c.get("envFrom", []):
                    ref = (ef.get("configMapRef") or {}).get("name")
                    if ref and ref not in configmaps:
                        err(f"{kind} {name}: envFrom ConfigMap {ref} is not rendered")
                for ev in c.get("env", []):
                    check_fleet.check_env_name(ev["name"], schema, f"[{label}] {kind} {name} env")
                    ref = ((ev.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
                    if ref and ref != secret and ev["name"].startswith("WEFT_"):
                        err(f"{kind} {name}: {ev['name']} reads Secret {ref}, not secrets.existingSecret ({secret})")
            for v in obj["spec"]["template"]["spec"].get("volumes", []):
                ref = (v.get("configMap") or {}).get("name")
                if ref and ref not in configmaps:
                    err(f"{kind} {name}: volume ConfigMap {ref} is not rendered")
    for name, cm in configmaps.items():
        for key in (cm.get("data") or {}):
            check_fleet.check_env_name(key, schema, f"[{label}] ConfigMap {name}")
    for name, svc in services.items():
        sel = svc["spec"].get("selector") or {}
        matched = [d for d in deployments.values() if selects(sel, pod_labels(d))]
        if len(matched) != 1:
            err(f"Service {name}: selects {len(matched)} Deployments, not one")
            continue
        ports = {p.get("name") for c in containers(matched[0]) for p in c.get("ports", [])}
        for p in svc["spec"].get("ports", []):
            if isinstance(p.get("targetPort"), str) and p["targetPort"] not in ports:
                err(f"Service {name}: targetPort {p['targetPort']!r} is not a port of {matched[0]['metadata']['name']}")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"]["selector"]["matchLabels"]
        if sum(selects(sel, pod_labels(d)) for d in deployments.values()) != 1:
            err(f"PodDisruptionBudget {pdb['metadata']['name']}: does not select exactly one Deployment")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]["name"]
        if target not in deployments:
            err(f"HorizontalPodAutoscaler {hpa['metadata']['name']}: targets {target}, which is not rendered")
        elif "replicas" in deployments[target]["spec"]:
            err(f"Deployment {target}: sets replicas although its HorizontalPodAutoscaler owns them")
    for ing in by_kind.get("Ingress", []):
        for rule in ing["spec"].get("rules", []):
            for p in rule["http"]["paths"]:
                b = p["backend"]["service"]
                svc = services.get(b["name"])
                if svc is None:
                    err(f"Ingress {ing['metadata']['name']}: backend Service {b['name']} is not rendered")
                elif b["port"].get("name") not in {q.get("name") for q in svc["spec"]["ports"]}:
                    err(f"Ingress {ing['metadata']['name']}: Service {b['name']} has no port {b['port']}")
    if kubernetes_validate is not None:
        for version in KUBE_VERSIONS:
            for d in docs:
                body = {k: v for k, v in d.items() if k != "__file"}
                try:
                    kubernetes_validate.validate(body, version, strict=True)
                except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                    first = str(e).splitlines()[0] if str(e) else type(e).__name__
                    err(f"{d['__file']}: {d['kind']} {d['metadata']['name']} is not valid for Kubernetes {version}: {first}")
    jobs = by_kind.get("Job", [])
    for job in jobs:
        hooks = (job["metadata"].get("annotations") or {}).get("helm.sh/hook", "")
        if set(hooks.split(",")) != {"pre-install", "pre-upgrade"}:
            err(f"Job {job['metadata']['name']}: helm.sh/hook is {hooks!r}, not pre-install,pre-upgrade")
        if "serviceAccountName" in job["spec"]["template"]["spec"]:
            err(f"Job {job['metadata']['name']}: a hook runs before the release's ServiceAccount exists")
    if merged["migration"]["enabled"] and not jobs:
        err("migration.enabled but no migration Job is rendered")
    return len(docs)


def main() -> int:
    chart = Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "weft").resolve()
    schema = check_fleet.config_schema()
    if kubernetes_validate is not None:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        low = re.search(r"(\d+\.\d+)", meta.get("kubeVersion", "") or "")
        KUBE_VERSIONS[:] = sorted({f"{low.group(1)}.0" if low else "1.25.0", kubernetes_validate.latest_version()})
    errors: list[str] = []
    counts = []
    for label, values in VALUE_SETS.items():
        counts.append(f"{label}: {check_set(chart, label, values, schema, errors)} manifests")
    errors += check_fleet.errors
    print(f"  Helm SDK {helm.helm_sdk_version()}: helm lint --strict and helm template for "
          f"{len(VALUE_SETS)} value sets ({'; '.join(counts)})")
    if kubernetes_validate is not None:
        print(f"  every manifest validated (strict) against Kubernetes {' and '.join(KUBE_VERSIONS)} schemas")
    else:
        print("  Kubernetes schemas: not checked (kubernetes-validate is not installed)")
    for e in errors:
        print(f"  ERROR {e}", file=sys.stderr)
    print(f"render.py: {'FAILED, ' + str(len(errors)) + ' errors' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
