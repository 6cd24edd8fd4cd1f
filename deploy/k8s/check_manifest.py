#!/usr/bin/python3
"""Offline check of deploy/k8s manifests (no cluster, no network).

usage: check_manifest.py MANIFEST.yaml [SECRET.yaml]

1. Schema: every document is decoded into the typed model of the official Kubernetes Python
   client (Debian's python3-kubernetes, generated from the API's OpenAPI spec): a required field
   that is missing fails (e.g. containers), a value of the wrong type fails; the model is then
   serialized back and must equal the input exactly, so a misspelt or unknown field (which the
   decoder drops) or a coerced value ("3" for 3) fails too.
2. What ringattn needs: a headless Service publishing not-ready pods, a StatefulSet bound to it
   with Parallel pod management, replicas = RINGATTN_WORLD_SIZE, rank from the pod-index label
   with a hostname fallback, master = pod 0's stable name on the rendezvous port, readiness on
   /healthz of the metrics port (liveness not on /healthz), Prometheus annotations, resources,
   the restricted security context, the token from the Secret with defaultMode 0400, every
   named port, volume and $(VAR) reference resolving, and the Secret's name and key matching.

Prints one line per problem; exit 0 when there is none, 1 otherwise.
"""
import re
import sys

import yaml
from kubernetes import client

API = client.ApiClient()
MODELS = {("v1", "Service"): "V1Service", ("apps/v1", "StatefulSet"): "V1StatefulSet",
          ("v1", "Secret"): "V1Secret"}
errors = []


def err(msg):
    errors.append(msg)


def diff(a, b, path):
    """Where the round-tripped `b` differs from the input `a`."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                err(f"{path}.{k}: unknown field (not in the Kubernetes API), or null")
            else:
                diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            err(f"{path}: list changed length in the model")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]")
    elif type(a) is not type(b) or a != b:
        err(f"{path}: {a!r} ({type(a).__name__}) is not of the API's type (model says {b!r})")


def schema(doc, where):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in MODELS:
        err(f"{where}: unexpected apiVersion/kind {key}")
        return
    try:
        obj = API._ApiClient__deserialize(doc, MODELS[key])
    except (ValueError, TypeError) as e:
        err(f"{where} {key[1]}: {e}")
        return
    diff(doc, API.sanitize_for_serialization(obj), f"{where} {key[1]}")


def get(d, *path, default=None):
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and isinstance(p, int) and p < len(d):
            d = d[p]
        else:
            return default
    return d


def semantics(docs, secrets):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    services = by_kind.get("Service", [])
    sets = by_kind.get("StatefulSet", [])
    if len(sets) != 1:
        err(f"expected one StatefulSet, found {len(sets)}")
        return
    sts = sets[0]
    name = get(sts, "metadata", "name")
    spec = sts.get("spec") or {}
    pod = get(spec, "template", "spec", default={})
    labels = get(spec, "template", "metadata", "labels", default={}) or {}
    annotations = get(spec, "template", "metadata", "annotations", default={}) or {}

    # the headless Service the StatefulSet names
    headless = [s for s in services if get(s, "metadata", "name") == spec.get("serviceName")]
    if not headless:
        err(f"StatefulSet.spec.serviceName {spec.get('serviceName')!r} names no Service in the file")
    else:
        h = headless[0]["spec"]
        if h.get("clusterIP") != "None":
            err("the StatefulSet's Service is not headless (clusterIP: None)")
        if h.get("publishNotReadyAddresses") is not True:
            err("the headless Service must publishNotReadyAddresses: pods are Ready only after the ring formed")
    match = get(spec, "selector", "matchLabels", default={}) or {}
    if not match or any(labels.get(k) != v for k, v in match.items()):
        err("StatefulSet selector.matchLabels do not match the pod template's labels")
    for s in services:
        sel = get(s, "spec", "selector", default={}) or {}
        own = {k: v for k, v in sel.items() if k != "statefulset.kubernetes.io/pod-name"}
        if any(labels.get(k) != v for k, v in own.items()):
            err(f"Service {get(s, 'metadata', 'name')}: selector does not match the pod template")
        podname = sel.get("statefulset.kubernetes.io/pod-name")
        if podname is not None and podname != f"{name}-0":
            err(f"Service {get(s, 'metadata', 'name')}: selects pod {podname}, not rank 0 ({name}-0)")
    if spec.get("podManagementPolicy") != "Parallel":
        err("podManagementPolicy must be Parallel (OrderedReady deadlocks: pod 0 is Ready only once all joined)")

    containers = pod.get("containers") or []
    main = [c for c in containers if "ringattn" in " ".join(c.get("command", []) + c.get("args", []))]
    if len(main) != 1:
        err("no (single) container runs ringattn")
        return
    c = main[0]
    env = c.get("env") or []
    names = [e.get("name") for e in env]
    envv = {e.get("name"): e for e in env}
    # $(VAR) references resolve to variables defined earlier in the list
    for i, e in enumerate(env):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(e.get("value", ""))):
            if ref not in names[:i]:
                err(f"env {e['name']}: $({ref}) is not defined before it")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    for s in services:
        for p in get(s, "spec", "ports", default=[]) or []:
            t = p.get("targetPort", p.get("port"))
            if isinstance(t, str) and t not in ports:
                err(f"Service {get(s, 'metadata', 'name')} port {p.get('name')}: targetPort {t} is no container port")
            if isinstance(t, str) and t in ports and p.get("port") != ports[t]:
                err(f"Service port {p.get('name')} {p.get('port')} differs from container port {ports[t]}")

    # rank from the ordinal: the pod-index label, else the hostname's suffix
    script = " ".join(c.get("command", []) + c.get("args", []))
    rank_env = [e for e in env if get(e, "valueFrom", "fieldRef", "fieldPath") ==
                "metadata.labels['apps.kubernetes.io/pod-index']"]
    if not rank_env:
        err("no env from the downward API label apps.kubernetes.io/pod-index")
    elif f"${{{rank_env[0]['name']}" not in script:
        err(f"the command does not use {rank_env[0]['name']}")
    if "${HOSTNAME##*-}" not in script:
        err("the command has no hostname-suffix fallback for the rank (${HOSTNAME##*-})")
    if "--rank" not in script:
        err("the command passes no --rank")

    world = get(envv, "RINGATTN_WORLD_SIZE", "value")
    if world is None or str(spec.get("replicas")) != world:
        err(f"RINGATTN_WORLD_SIZE {world!r} differs from replicas {spec.get('replicas')!r}")
    svc = spec.get("serviceName")
    want_master = f"{name}-0.{svc}.$(POD_NAMESPACE).svc.cluster.local:{ports.get('rendezvous')}"
    if get(envv, "RINGATTN_MASTER", "value") != want_master:
        err(f"RINGATTN_MASTER is {get(envv, 'RINGATTN_MASTER', 'value')!r}, want {want_master!r}")
    if get(envv, "POD_NAMESPACE", "valueFrom", "fieldRef", "fieldPath") != "metadata.namespace":
        err("POD_NAMESPACE is not the pod's namespace (downward API)")
    for var, port in (("RINGATTN_CONTROL", "control"), ("RINGATTN_METRICS", "metrics"), ("RINGATTN_LISTEN", "ring")):
        v = str(get(envv, var, "value", default=""))
        if port not in ports or not v.endswith(f":{ports[port]}"):
            err(f"{var} {v!r} does not use the container port named {port}")

    # probes
    rp = c.get("readinessProbe") or {}
    if get(rp, "httpGet", "path") != "/healthz" or get(rp, "httpGet", "port") not in ("metrics", ports.get("metrics")):
        err("readinessProbe must be httpGet /healthz on the metrics port")
    lp = c.get("livenessProbe")
    if not lp:
        err("no livenessProbe")
    elif get(lp, "httpGet", "path") == "/healthz":
        err("livenessProbe on /healthz would kill every pod while the ring re-forms")
    # metrics annotations
    if annotations.get("prometheus.io/scrape") != "true":
        err("pod template lacks prometheus.io/scrape: \"true\"")
    if annotations.get("prometheus.io/port") != str(ports.get("metrics")):
        err("prometheus.io/port is not the metrics container port")
    if annotations.get("prometheus.io/path") != "/metrics":
        err("prometheus.io/path is not /metrics")
    # resources
    for k in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if get(c, "resources", k, r) is None:
                err(f"resources.{k}.{r} not set")
    # security
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
        err("runAsNonRoot not set")
    if csc.get("readOnlyRootFilesystem") is not True:
        err("readOnlyRootFilesystem not true")
    if csc.get("allowPrivilegeEscalation") is not False:
        err("allowPrivilegeEscalation not false")
    if "ALL" not in (get(csc, "capabilities", "drop", default=[]) or []):
        err("capabilities do not drop ALL")
    if (get(psc, "runAsUser") or 0) == 0 and (get(csc, "runAsUser") or 0) == 0:
        err("no non-zero runAsUser (runAsNonRoot needs a numeric user unless the image sets one)")
    # drain: the grace period outlives the daemon's drain grace
    # (a SIGTERM while the ring forms waits for the attempt: RINGATTN_CONNECT_TIMEOUT, default 60)
    term = pod.get("terminationGracePeriodSeconds", 30)
    for var, default in (("RINGATTN_GRACE", 0), ("RINGATTN_CONNECT_TIMEOUT", 60)):
        limit = float(get(envv, var, "value", default=default))
        if not term > limit:
            err(f"terminationGracePeriodSeconds {term} must exceed {var} ({limit:g})")

    # volumes and the token
    vols = {v.get("name"): v for v in pod.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        if m.get("name") not in vols:
            err(f"volumeMount {m.get('name')} names no volume")
    secret_vols = [v for v in vols.values() if "secret" in v]
    if not secret_vols:
        err("no Secret volume for the token")
    for v in secret_vols:
        sv = v["secret"]
        if sv.get("defaultMode") != 0o400:
            err(f"Secret volume {v['name']}: defaultMode {sv.get('defaultMode')!r}, want 0400 (256)")
        mount = [m for m in c.get("volumeMounts") or [] if m.get("name") == v["name"]]
        if not mount or mount[0].get("readOnly") is not True:
            err(f"Secret volume {v['name']} is not mounted readOnly")
        elif mount[0]["mountPath"] not in script:
            err(f"the command does not read the token from {mount[0]['mountPath']}")
        if secrets:
            for s in secrets:
                if get(s, "metadata", "name") != sv.get("secretName"):
                    err(f"Secret {get(s, 'metadata', 'name')!r} is not the one mounted ({sv.get('secretName')!r})")
                keys = set((s.get("data") or {}) | (s.get("stringData") or {}))
                for it in sv.get("items") or []:
                    if it.get("key") not in keys:
                        err(f"Secret {get(s, 'metadata', 'name')} has no key {it.get('key')!r}")
    if "--token-file" not in script:
        err("the command passes no --token-file")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    docs = []
    secrets = []
    for i, path in enumerate(sys.argv[1:]):
        try:
            with open(path) as f:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except (OSError, yaml.YAMLError) as e:
            err(f"{path}: {e}")
            continue
        for n, d in enumerate(loaded):
            if not isinstance(d, dict):
                err(f"{path} document {n}: not a mapping")
                continue
            schema(d, f"{path}#{n}")
            (docs if i == 0 else secrets).append(d)
    if docs:
        semantics(docs, secrets)
    for e in errors:
        print(f"  {e}")
    kinds = ", ".join(f"{d.get('kind')}/{get(d, 'metadata', 'name')}" for d in docs + secrets)
    print(f"  {'FAIL' if errors else 'ok'}: {kinds} ({len(errors)} problems)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
