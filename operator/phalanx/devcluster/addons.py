"""`phalanx dev-cluster up --addons jobset,lws,trainer,kueue`: the real controllers Phalanx integrates with,
each built from the Go module proxy at its released version and run as a local process against the dev
cluster, so integration tests meet JobSet, LeaderWorkerSet, Kubeflow Trainer and Kueue themselves.

Everything comes from the released module source in the Go module cache, never from a copy in this repo:
the CRDs (installed before kube-controller-manager starts, so its garbage collector watches them from its
first discovery: a deleted Job's Kueue Workload goes at once, not after the 30 s resync) and the webhook
manifests (their kustomize patches applied, `service` turned into `url: https://127.0.0.1:<port>` with a
CA bundle). Webhooks a controller needs are kept with their own selectors (JobSet's and LWS's pod webhooks
see only their pods); those that would intercept unrelated objects, or serve a Kueue framework not turned
on, are left out. Health, metrics and webhooks listen on free loopback ports; leader election and internal
certificate management are off. `up` returns only when each controller's workers run and a dry-run create
has passed through each webhook (mutated where the webhook mutates). Details: docs/dev-cluster.md.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from phalanx import certs
from phalanx.devcluster.binaries import minor, repo_root
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.procs import free_ports, http_ok, running, stop_process
from phalanx.devcluster.state import ClusterError, ClusterState

Log = Callable[[str], None]
FIELD_MANAGER = "phalanx-dev-cluster"
# Kueue v0.17 reads its metrics certificate from this fixed path when internal cert management is off
# (cmd/kueue/main.go); it gets one through a private overlay of /etc (see _kueue_launcher).
KUEUE_METRICS_CERTS = "/etc/kueue/metrics/certs"


@dataclass(frozen=True)
class Addon:
    """One controller: where its source and manifests are, and what `up` waits for."""

    name: str
    module: str  # Go module
    version: str
    go_dir: str  # hack/addons/<go_dir>: the pinned go.mod that builds it
    crds: tuple[str, ...]  # folders of CRD YAML inside the module source
    webhooks: str  # the kustomize folder of its webhook manifests inside the module source
    groups: tuple[str, ...]  # API groups its kept webhooks may cover ("" = core, only with a selector)
    namespace: str
    # controllerKind (or controller name) of the controllers whose workers must run before `up` returns
    kinds: tuple[str, ...]
    requires: tuple[str, ...] = ()
    # The oldest Kubernetes minor whose kube-apiserver takes its CRDs (0: every version the dev cluster
    # builds), and why an older one does not, in the apiserver's own words (docs/versions.md).
    since_minor: int = 0
    older_refuses: str = ""


# A kube-apiserver before v1.32 takes none of CEL's reserved words (`namespace` among them) as a field name
# in a CRD's validation rules unless escaped (`__namespace__`): k8s.io/apiserver pkg/cel/environment
# recognises them from compatibility version 1.31, the least a v1.32 apiserver accepts. JobSet v0.11.1's
# rule on spec.volumeClaimPolicies[] reads t.metadata.namespace unescaped: v1.30.14 refuses the CRD so.
_CEL_NAMESPACE = "the validation rule on volumeClaimPolicies[].templates: undefined field 'namespace'"

ADDONS: dict[str, Addon] = {
    a.name: a
    for a in (
        Addon(
            "jobset",
            "sigs.k8s.io/jobset",
            "v0.11.1",
            "jobset-lws",
            ("config/components/crd/bases",),
            "config/components/webhook",
            ("jobset.x-k8s.io", ""),
            "jobset-system",
            ("JobSet", "Pod"),
            since_minor=32,
            older_refuses=f"kube-apiserver refuses its CRD jobsets.jobset.x-k8s.io ({_CEL_NAMESPACE})",
        ),
        Addon(
            "lws",
            "sigs.k8s.io/lws",
            "v0.8.0",
            "jobset-lws",
            ("config/crd/bases",),
            "config/webhook",
            ("leaderworkerset.x-k8s.io", ""),
            "lws-system",
            ("LeaderWorkerSet", "Pod"),
        ),
        Addon(
            "trainer",
            "github.com/kubeflow/trainer/v2",
            "v2.2.0",
            "kueue-trainer",
            ("manifests/base/crds",),
            "manifests/base/webhook",
            ("trainer.kubeflow.org",),
            "kubeflow-system",
            ("trainjob_controller",),  # named controllers: no controllerKind in their log lines
            requires=("jobset",),
            since_minor=32,
            older_refuses=(
                "kube-apiserver refuses its CRDs (cluster)trainingruntimes.trainer.kubeflow.org, which embed "
                f"JobSet's spec ({_CEL_NAMESPACE}); and it needs jobset"
            ),
        ),
        Addon(
            "kueue",
            "sigs.k8s.io/kueue",
            "v0.17.0",
            "kueue-trainer",
            ("config/components/crd/bases",),
            "config/components/webhook",
            ("kueue.x-k8s.io", "batch"),
            "kueue-system",
            # its reconcilers log under a logger name (plus one per framework: KUEUE_FRAMEWORKS)
            ("job", "workload-reconciler", "clusterqueue-reconciler", "localqueue-reconciler"),
        ),
    )
}
# Start order (also `down`'s, reversed): JobSet before Trainer, which makes JobSets; Kueue last, as it
# integrates the others.
ORDER = ("jobset", "lws", "trainer", "kueue")


def parse(spec: str | Iterable[str]) -> tuple[list[str], list[str]]:
    """The addons asked for, in start order, with what they need; and which of them were added for that.

    >>> parse("trainer")
    (['jobset', 'trainer'], ['jobset'])
    """
    asked = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [a for a in asked if a not in ADDONS]
    if unknown:
        raise ClusterError(
            f"unknown addon {', '.join(repr(u) for u in unknown)}: choose from {', '.join(ORDER)}"
        )
    wanted = set(asked)
    added: set[str] = set()
    for name in asked:
        for need in ADDONS[name].requires:
            if need not in wanted:
                added.add(need)
                wanted.add(need)
    return [n for n in ORDER if n in wanted], [n for n in ORDER if n in added]


def unsupported(name: str, version: str) -> str | None:
    """Why addon `name` does not run on Kubernetes `version` (a kube-apiserver too old for its CRDs), or None.

    >>> unsupported("lws", "v1.30.14") is None
    True
    """
    addon = ADDONS[name]
    if minor(version) >= addon.since_minor:
        return None
    since = f"v1.{addon.since_minor}"
    return f"{addon.name} {addon.version} needs Kubernetes {since} or newer: {addon.older_refuses}"


def refuse_unsupported(names: Iterable[str], version: str) -> None:
    """`up --addons` on a version an addon does not run on: refused before anything starts, naming each
    addon, the apiserver's reason and what does run there."""
    reasons = [why for name in names if (why := unsupported(name, version))]
    if reasons:
        runs = [n for n in ORDER if unsupported(n, version) is None]
        raise ClusterError(
            "--addons: " + "; ".join(reasons) + f". On {version} these run: {', '.join(runs) or 'none'}"
        )


# ---------------------------------------------------------------------------- binaries and sources
def cache_dir() -> Path:
    override = os.environ.get("PHALANX_ADDONS_CACHE")  # hack/build-addons.sh reads it too
    if override:
        return Path(override)
    root = repo_root()
    return (root if root else Path.home()) / ".cache" / "addons"


def binary(addon: Addon) -> Path:
    """Where hack/build-addons.sh puts it: keyed by version, so another version is built beside it."""
    return cache_dir() / f"{addon.name}-{addon.version}" / addon.name


def ensure_built(names: Iterable[str], log: Log) -> None:
    """Build what is missing (hack/build-addons.sh; minutes when cold), one `go build` at a time."""
    missing = [n for n in names if not os.access(binary(ADDONS[n]), os.X_OK)]
    if not missing:
        return
    root = repo_root()
    if root is None:
        raise ClusterError(
            f"addon binaries missing ({', '.join(missing)}) and no Phalanx checkout to build them from: "
            "run hack/build-addons.sh in one (Go >= 1.26 and the Go module proxy)"
        )
    log(f"building {', '.join(missing)} (hack/build-addons.sh; cold: minutes)")
    started = time.monotonic()
    subprocess.run(["bash", str(root / "hack" / "build-addons.sh"), *missing], check=True, stdout=sys.stderr)
    absent = [n for n in missing if not os.access(binary(ADDONS[n]), os.X_OK)]
    if absent:
        raise ClusterError(f"hack/build-addons.sh finished but {', '.join(absent)} are still missing")
    log(f"built {', '.join(missing)} in {time.monotonic() - started:.0f} s")


def source_dir(addon: Addon) -> Path:
    """The released module source in the Go module cache (`go mod download`, verified against the pinned
    go.sum when run from a checkout)."""
    root = repo_root()
    go_dir = root / "hack" / "addons" / addon.go_dir if root else None
    if go_dir is not None and go_dir.is_dir():
        argv, cwd = ["go", "mod", "download", "-json", addon.module], go_dir
    else:
        argv, cwd = ["go", "mod", "download", "-json", f"{addon.module}@{addon.version}"], Path.cwd()
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or "Dir" not in info or info.get("Version") != addon.version:
        raise ClusterError(
            f"go mod download {addon.module}@{addon.version} failed: {info.get('Error') or result.stderr}"
        )
    return Path(info["Dir"])


# ---------------------------------------------------------------------------- manifests
def crd_documents(addon: Addon, source: Path) -> list[dict[str, Any]]:
    docs = []
    for folder in addon.crds:
        for path in sorted((source / folder).glob("*.yaml")):
            docs += [
                d
                for d in yaml.safe_load_all(path.read_text())
                if d and d.get("kind") == "CustomResourceDefinition"
            ]
    if not docs:
        raise ClusterError(f"no CRDs found for {addon.name} under {source} ({', '.join(addon.crds)})")
    return docs


def _json_pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return parts


def apply_json6902(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The JSON patch operations kustomize applies (replace, add, remove) on a webhook configuration."""
    for op in ops:
        *parents, last = _json_pointer(op["path"])
        target: Any = doc
        for part in parents:
            target = target[part]
        kind = op["op"]
        if kind == "remove":
            del target[last]
        elif kind == "replace":
            target[last] = op["value"]
        elif kind == "add":
            if isinstance(target, list):
                if last == "-":
                    target.append(op["value"])
                else:
                    assert isinstance(last, int)
                    target.insert(last, op["value"])
            else:
                target[last] = op["value"]
        else:
            raise ClusterError(f"unsupported patch operation {kind!r} in a webhook kustomization")


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def apply_strategic(doc: dict[str, Any], patch: dict[str, Any]) -> None:
    """A strategic-merge patch of a webhook configuration: webhooks merge by name, maps deeply."""
    for key, value in patch.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key == "webhooks":
            by_name = {w["name"]: w for w in doc.get("webhooks", [])}
            for hook in value:
                if hook["name"] in by_name:
                    _merge(by_name[hook["name"]], hook)
                else:
                    doc.setdefault("webhooks", []).append(hook)
        elif isinstance(value, dict) and isinstance(doc.get(key), dict):
            _merge(doc[key], value)
        else:
            doc[key] = value


def _targets(doc: dict[str, Any], target: dict[str, Any] | None) -> bool:
    if target is None:
        return True
    if target.get("kind") and target["kind"] != doc.get("kind"):
        return False
    return not (target.get("name") and target["name"] != doc.get("metadata", {}).get("name"))


def webhook_documents(addon: Addon, source: Path) -> list[dict[str, Any]]:
    """The addon's webhook configurations as its kustomization renders them (patches applied; the
    Service and the CA injection are replaced by `url` clientConfigs later)."""
    folder = source / addon.webhooks
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        for doc in yaml.safe_load_all((folder / resource).read_text()):
            if doc and doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                docs.append(doc)
    for entry in kustomization.get("patches", []) + kustomization.get("patchesJson6902", []):
        text = entry["patch"] if "patch" in entry else (folder / entry["path"]).read_text()
        patch = yaml.safe_load(text)
        for doc in docs:
            if isinstance(patch, list):
                if _targets(doc, entry.get("target")):
                    apply_json6902(doc, patch)
            elif (
                isinstance(patch, dict)
                and patch.get("kind") == doc["kind"]
                and patch.get("metadata", {}).get("name") in (None, doc["metadata"]["name"])
                and _targets(doc, entry.get("target"))
            ):
                apply_strategic(doc, patch)
    return docs


def _hook_groups(hook: dict[str, Any]) -> set[str]:
    return {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}


def _hook_resources(hook: dict[str, Any]) -> set[str]:
    return {r.split("/")[0] for rule in hook.get("rules", []) for r in rule.get("resources", [])}


def keep_webhook(addon: Addon, hook: dict[str, Any], frameworks: Iterable[str] = ()) -> bool:
    """Keep a webhook the controller needs; leave out one that would intercept unrelated objects.

    Core-group (pod) webhooks are kept only with an objectSelector of the addon's own (JobSet's and LWS's
    pods are labelled). Kueue's are kept for its own group and the frameworks turned on: a webhook of a
    framework that is off has no handler and would fail every request it sees. Its pod webhooks, on only
    for LWS, get LWS's pod label as objectSelector in rewrite_webhooks.
    """
    groups = _hook_groups(hook)
    allowed = set(addon.groups)
    if addon.name == "kueue":
        allowed |= {KUEUE_FRAMEWORKS[f][0] for f in frameworks}
        if "pod" in kueue_implicit(frameworks):
            return (
                bool(groups)
                and groups <= allowed | {""}
                and ("" not in groups or _hook_resources(hook) == {"pods"})
            )
    if not groups or not groups <= allowed:
        return False
    return "" not in groups or bool(hook.get("objectSelector"))


# Kueue frameworks Phalanx's dev cluster may turn on: API group and resource of the webhooks each serves,
# and the logger name of its reconciler.
KUEUE_FRAMEWORKS: dict[str, tuple[str, str, str]] = {
    "batch/job": ("batch", "jobs", "job"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets", "jobset"),
    "leaderworkerset.x-k8s.io/leaderworkerset": (
        "leaderworkerset.x-k8s.io",
        "leaderworkersets",
        "leaderworkerset",
    ),
    # A TrainJob's webhooks are named mtrainjob.kb.io / vtrainjob.kb.io in v0.17; its reconciler logs as
    # `trainjob` (Trainer's own is `trainjob_controller`, in Trainer's log).
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs", "trainjob"),
}
# LWS's integration turns Kueue's pod integration on with it (ImplicitlyEnabledFrameworkNames).
LWS_POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def kueue_implicit(frameworks: Iterable[str]) -> set[str]:
    return {"pod"} if "leaderworkerset.x-k8s.io/leaderworkerset" in frameworks else set()


def kueue_frameworks(addons: Iterable[str]) -> list[str]:
    """batch/job always; JobSet, LWS and Trainer's TrainJob when those addons run too.

    >>> kueue_frameworks(["jobset", "trainer", "kueue"])
    ['batch/job', 'jobset.x-k8s.io/jobset', 'trainer.kubeflow.org/trainjob']
    """
    names = set(addons)
    frameworks = ["batch/job"]
    if "jobset" in names:
        frameworks.append("jobset.x-k8s.io/jobset")
    if "lws" in names:
        frameworks.append("leaderworkerset.x-k8s.io/leaderworkerset")
    if "trainer" in names:
        frameworks.append("trainer.kubeflow.org/trainjob")
    return frameworks


def rewrite_webhooks(
    addon: Addon, docs: list[dict[str, Any]], port: int, ca_bundle: bytes, frameworks: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """url clientConfigs on 127.0.0.1:port with our CA; names prefixed with the addon's; only kept hooks."""
    import base64

    bundle = base64.b64encode(ca_bundle).decode()
    out = []
    for doc in docs:
        kept = []
        for hook in doc.get("webhooks", []):
            if not keep_webhook(addon, hook, frameworks):
                continue
            hook = dict(hook)
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            hook["timeoutSeconds"] = 10
            # Unique across addons (JobSet, LWS and Kueue all name theirs mpod.kb.io): a refusal then says
            # whose webhook it was, e.g. admission webhook "lws.mpod.kb.io" denied the request.
            hook["name"] = f"{addon.name}.{hook['name']}"
            if addon.name == "kueue" and "" in _hook_groups(hook):
                # Only the pods of LeaderWorkerSets (the reason the pod integration is on).
                hook["objectSelector"] = LWS_POD_SELECTOR
            kept.append(hook)
        if kept:
            name = doc["metadata"]["name"]
            out.append(
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": doc["kind"],
                    "metadata": {
                        "name": f"{addon.name}-{name}",
                        "labels": {"dev-cluster.phalanx.dev/addon": addon.name},
                    },
                    "webhooks": kept,
                }
            )
    return out


# ---------------------------------------------------------------------------- apply
def apply(client: RestClient, doc: dict[str, Any]) -> Any:
    """Server-side apply (JSON is YAML), cluster-scoped or namespaced by the document."""
    api_version, kind = doc["apiVersion"], doc["kind"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
        "Namespace": "namespaces",
    }[kind]
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    return client.request(
        "PATCH",
        f"{base}/{plural}/{doc['metadata']['name']}?fieldManager={FIELD_MANAGER}&force=true",
        doc,
        "application/apply-patch+yaml",
    )


def install_crds(
    client: RestClient, names: Iterable[str], sources: dict[str, Path], timeout: float
) -> dict[str, list[str]]:
    """Every CRD of the addons, and wait until each is Established (served). Returns them by addon."""
    by_addon: dict[str, list[str]] = {}
    for name in names:
        for doc in crd_documents(ADDONS[name], sources[name]):
            apply(client, doc)
            by_addon.setdefault(name, []).append(doc["metadata"]["name"])
    installed = [crd for crds in by_addon.values() for crd in crds]

    def established() -> bool:
        for crd in installed:
            status = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}").get(
                "status", {}
            )
            if not any(
                c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or []
            ):
                return False
        return True

    _poll(f"{len(installed)} addon CRDs Established", established, timeout)
    return by_addon


# ---------------------------------------------------------------------------- processes
@dataclass
class Started:
    """What start() records for one addon in state.addons[name]."""

    name: str
    version: str
    binary: str
    pid_name: str
    log: str
    config: str
    cert_dir: str
    webhook_port: int
    metrics_port: int
    health_port: int
    webhook_configurations: list[str] = field(default_factory=list)
    crds: list[str] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)
    ready_seconds: float = 0.0


def _config(addon: Addon, s: Started, frameworks: list[str]) -> dict[str, Any]:
    leader = {"leaderElect": False}
    client = {"qps": 200, "burst": 400}
    if addon.name in ("jobset", "lws"):
        cfg: dict[str, Any] = {
            "apiVersion": f"config.{'jobset' if addon.name == 'jobset' else 'lws'}.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "webhook": {"port": s.webhook_port, "host": "127.0.0.1", "certDir": s.cert_dir},
            "metrics": {"bindAddress": f"127.0.0.1:{s.metrics_port}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{s.health_port}"},
            "leaderElection": leader,
            "internalCertManagement": {"enable": False},
            "clientConnection": client,
        }
        if addon.name == "jobset":
            cfg["metrics"]["certDir"] = s.cert_dir
        return cfg
    if addon.name == "trainer":
        # No certDir field: controller-runtime's default, $TMPDIR/k8s-webhook-server/serving-certs.
        return {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"port": s.webhook_port, "host": "127.0.0.1"},
            "metrics": {"bindAddress": f"127.0.0.1:{s.metrics_port}", "secureServing": True},
            "health": {
                "healthProbeBindAddress": f"127.0.0.1:{s.health_port}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
            "leaderElection": {
                **leader,
                "resourceName": "trainer.kubeflow.org",
                "resourceNamespace": addon.namespace,
            },
            "certManagement": {"enable": False},
            "clientConnection": client,
        }
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": addon.namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{s.health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{s.metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": s.webhook_port, "certDir": s.cert_dir},
        "leaderElection": leader,
        "internalCertManagement": {"enable": False},
        "clientConnection": client,
        "integrations": {"frameworks": frameworks},
        # TAS is on by default in v0.17 (set anyway); no visibility extension API server.
        "featureGates": {"TopologyAwareScheduling": True, "VisibilityOnDemand": False},
    }


def _kueue_launcher(home: Path, cert_dir: Path, argv: list[str]) -> list[str]:
    """Kueue in a private mount namespace with an overlay on /etc holding its fixed-path metrics
    certificate; the host's /etc is never written, and the overlay goes with the process."""
    upper, work = home / "etc-upper", home / "etc-work"
    for d in (upper, work):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    script = home / "run-kueue.sh"
    quoted = " ".join(_sh(a) for a in argv)
    script.write_text(
        "#!/bin/sh\n"
        "# Written by phalanx dev-cluster: Kueue's metrics certificate at its fixed path, in a private\n"
        "# /etc (an overlay in this process's own mount namespace).\n"
        "set -e\n"
        f"mount -t overlay -o lowerdir=/etc,upperdir={_sh(str(upper))},workdir={_sh(str(work))} \\\n"
        "  overlay /etc\n"
        f"mkdir -p {KUEUE_METRICS_CERTS}\n"
        f"cp {_sh(str(cert_dir / 'tls.crt'))} {_sh(str(cert_dir / 'tls.key'))} {KUEUE_METRICS_CERTS}/\n"
        f"exec {quoted}\n"
    )
    script.chmod(0o755)
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ClusterError("kueue addon: `unshare` (util-linux) is needed for its private /etc overlay")
    # Root: a mount namespace is enough. Otherwise map ourselves to root in a user namespace of our own
    # (Linux >= 5.11 mounts overlayfs there).
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--mount", "--propagation", "private", "/bin/sh", str(script)]


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _spawn(state: ClusterState, s: Started, argv: list[str], env: dict[str, str]) -> None:
    with open(s.log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state.path,
            env=env,
            start_new_session=True,  # outlives `up`; `down` signals its group
        )
    state.pids[s.pid_name] = proc.pid
    state.save()


def start(
    state: ClusterState,
    names: list[str],
    sources: dict[str, Path],
    crds: dict[str, list[str]],
    log: Log,
    timeout: float,
) -> None:
    """Start every addon (all at once), install its webhooks, and return when all are ready."""
    client = state.client()
    home = state.path / "addons"
    pki = state.path / "pki"
    ca = certs.KeyPair((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    serving = certs.issue(ca, "phalanx-dev-cluster-addon-webhooks", ["127.0.0.1", "localhost"])
    frameworks = kueue_frameworks(names)
    started: list[tuple[Started, int, float]] = []
    # Every addon's ports in one pick: picked one addon at a time, the next addon's pick could return a port
    # the one just spawned had not bound yet (CI once saw JobSet's manager exit on "address already in use").
    ports = iter(free_ports(3 * len(names)))
    for name in names:
        addon = ADDONS[name]
        apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": addon.namespace}})
        folder = home / name
        tmp = folder / "tmp"
        cert_dir = folder / "certs"
        # Trainer's webhook server looks in $TMPDIR/k8s-webhook-server/serving-certs.
        trainer_certs = tmp / "k8s-webhook-server" / "serving-certs"
        for d in (folder, tmp, cert_dir, trainer_certs):
            d.mkdir(parents=True, exist_ok=True)
        serving.write(cert_dir / "tls.crt", cert_dir / "tls.key")
        if name == "trainer":
            serving.write(trainer_certs / "tls.crt", trainer_certs / "tls.key")
        webhook_port, metrics_port, health_port = next(ports), next(ports), next(ports)
        s = Started(
            name=name,
            version=addon.version,
            binary=str(binary(addon)),
            pid_name=f"addon-{name}",
            log=str(state.logs / f"addon-{name}.log"),
            config=str(folder / "config.yaml"),
            cert_dir=str(cert_dir),
            webhook_port=webhook_port,
            metrics_port=metrics_port,
            health_port=health_port,
            crds=crds.get(name, []),
            frameworks=frameworks if name == "kueue" else [],
        )
        Path(s.config).write_text(json.dumps(_config(addon, s, frameworks), indent=2))
        offset = _log_size(s)
        state.addons[name] = _record(s)
        _launch(state, s)
        hooks = rewrite_webhooks(
            addon, webhook_documents(addon, sources[name]), webhook_port, ca.cert_pem, frameworks
        )
        for doc in hooks:
            apply(client, doc)
        s.webhook_configurations = [d["metadata"]["name"] for d in hooks]
        state.addons[name] = _record(s)
        state.save()
        started.append((s, offset, time.monotonic()))
    for s, offset, t0 in started:
        _wait_ready(state, ADDONS[s.name], s, offset, timeout)
        s.ready_seconds = round(time.monotonic() - t0, 2)
        state.addons[s.name] = _record(s)
        state.save()
        log(
            f"addon {s.name} {s.version} ready in {s.ready_seconds:.1f} s (webhooks :{s.webhook_port}, "
            f"health :{s.health_port}, metrics :{s.metrics_port}, log {s.log})"
        )


def _launch(state: ClusterState, s: Started) -> None:
    """Spawn the addon `s` describes, its config file written."""
    folder = Path(s.config).parent
    # The kubeconfig comes from $KUBECONFIG (controller-runtime); the config path names the cluster
    # folder in the command line, which is how `down` knows the pid is still ours.
    argv = [s.binary, f"--config={s.config}"]
    if s.name == "kueue":
        argv = _kueue_launcher(folder, Path(s.cert_dir), argv)
    env = {**os.environ, "KUBECONFIG": str(state.kubeconfig), "TMPDIR": str(folder / "tmp")}
    _spawn(state, s, argv, env)


def _log_size(s: Started) -> int:
    return Path(s.log).stat().st_size if Path(s.log).exists() else 0


def configuration(name: str, s: Started, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The addon's Configuration as `up` writes it, with `overrides` merged in (maps deeply, any other value
    replaced): e.g. Kueue's `{"fairSharing": {"preemptionStrategies": [...]}}`."""
    cfg = _config(ADDONS[name], s, s.frameworks)
    if overrides:
        _merge(cfg, copy.deepcopy(dict(overrides)))
    return cfg


def restart(
    state: ClusterState,
    name: str,
    log: Log,
    overrides: Mapping[str, Any] | None = None,
    timeout: float = 180.0,
) -> None:
    """Stop a running addon and start it again as `up` did (the same binary, ports, certificates and log;
    its webhooks and CRDs stay installed), its Configuration with `overrides` merged in (None: as `up`
    wrote it). A test that needs one controller set otherwise (Kueue's fair sharing) restarts it so on
    the session's cluster, and back, rather than bringing up a second cluster. Returns once it is ready,
    by the checks `up` makes (its workers run, a dry run passes through each of its webhooks)."""
    info = state.addons.get(name)
    if info is None:
        raise ClusterError(f"addon {name} was not started on this cluster (`up --addons {name}`)")
    s = Started(**info)
    pid = state.pids.get(s.pid_name)
    if pid is not None:
        stop_process(pid, state.path, grace=30)
    Path(s.config).write_text(json.dumps(configuration(name, s, overrides), indent=2))
    offset = _log_size(s)
    started = time.monotonic()
    _launch(state, s)
    _wait_ready(state, ADDONS[name], s, offset, timeout)
    s.ready_seconds = round(time.monotonic() - started, 2)
    state.addons[name] = _record(s)
    state.save()
    said = f" with {json.dumps(dict(overrides))}" if overrides else ""
    log(f"addon {name} {s.version} restarted{said}, ready in {s.ready_seconds:.1f} s (log {s.log})")


def _record(s: Started) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(s)


def _log_since(path: str, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def workers_started(text: str, kind: str) -> bool:
    """controller-runtime's `Starting workers` line for a controller of this kind or name (JSON or console
    logs)."""
    named = re.escape(kind)
    key = rf'"(controllerKind|controller|logger)":\s*"{named}"'
    return re.search(rf"{key}.*Starting workers|Starting workers.*{key}", text) is not None


def _wait_ready(state: ClusterState, addon: Addon, s: Started, offset: int, timeout: float) -> None:
    client = state.client()
    probes = PROBES[addon.name](s)

    def alive() -> None:
        pid = state.pids.get(s.pid_name)
        if pid is None or not running(pid, state.path):
            tail = _log_since(s.log, offset)[-3000:]
            raise ClusterError(f"addon {addon.name} exited during start-up; end of {s.log}:\n{tail}")

    _poll(
        f"addon {addon.name} /readyz on 127.0.0.1:{s.health_port}",
        lambda: http_ok(f"http://127.0.0.1:{s.health_port}/readyz", b"ok"),
        timeout,
        alive,
    )
    kinds = list(addon.kinds) + [KUEUE_FRAMEWORKS[f][2] for f in s.frameworks]
    for kind in dict.fromkeys(kinds):
        _poll(
            f"addon {addon.name}: workers of its {kind} controller (log {s.log})",
            lambda kind=kind: workers_started(_log_since(s.log, offset), kind),  # type: ignore[misc]
            timeout,
            alive,
        )
    for probe in probes:
        answers: list[str] = []

        def passes(probe: Probe = probe, answers: list[str] = answers) -> bool:
            ok, why = probe.run(client)
            answers.append(why)
            return ok

        try:
            _poll(f"addon {addon.name}: {probe.what}", passes, timeout, alive)
        except ClusterError as e:
            raise ClusterError(f"{e}; last answer: {answers[-1] if answers else '-'}") from e


def _poll(
    what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], None] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            if check():
                return
        except (OSError, ApiError):
            pass
        time.sleep(0.2)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")


# ---------------------------------------------------------------------------- webhook probes
@dataclass(frozen=True)
class Probe:
    """A server-side dry-run create that passes through a webhook. With failurePolicy Fail, a webhook that
    does not answer fails the request ("failed calling webhook"); `check` also sees its mutation, or
    `denied` the webhook's own refusal."""

    what: str
    path: str
    body: dict[str, Any]
    check: Callable[[dict[str, Any]], bool] | None = None
    denied: str | None = None  # a refusal that names this text passes (a validating webhook answered)

    def run(self, client: RestClient) -> tuple[bool, str]:
        try:
            answer = client.request("POST", f"{self.path}?dryRun=All&fieldManager={FIELD_MANAGER}", self.body)
        except ApiError as e:
            message = e.body.replace('\\"', '"')  # the Status's message, quotes unescaped
            if self.denied is not None and "denied the request" in message and self.denied in message:
                return True, e.body[:300]
            return False, e.body[:500]
        if self.check is None or self.check(answer):
            return True, "ok"
        return False, f"not mutated: {json.dumps(answer)[:500]}"


def _get(obj: Any, *path: str | int) -> Any:
    for part in path:
        try:
            obj = obj[part]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def _pod(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "addon-probe-", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "simulated/probe:1"}]},
    }


def _pod_template() -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "simulated/probe:1"}]}}


def _jobset_probes(s: Started) -> list[Probe]:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"generateName": "addon-probe-"},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": _pod_template()}}}]},
    }
    pod_path = "/api/v1/namespaces/default/pods"
    return [
        Probe(
            "JobSet's defaulting webhook (restartPolicy OnFailure)",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
            jobset,
            lambda a: (
                _get(a, "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "restartPolicy")
                == "OnFailure"
            ),
        ),
        Probe("JobSet's pod webhooks", pod_path, _pod({"jobset.sigs.k8s.io/jobset-name": "addon-probe"})),
    ]


def _lws_probes(s: Started) -> list[Probe]:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"generateName": "addon-probe-"},
        "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": _pod_template()}},
    }
    return [
        Probe(
            "LWS's defaulting webhook (networkConfig.subdomainPolicy)",
            "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets",
            lws,
            lambda a: _get(a, "spec", "networkConfig", "subdomainPolicy") == "Shared",
        ),
        Probe(
            "LWS's pod webhooks (a pod without its group's annotations is refused)",
            "/api/v1/namespaces/default/pods",
            _pod({"leaderworkerset.sigs.k8s.io/name": "addon-probe"}),
            denied='admission webhook "lws.mpod.kb.io"',
        ),
    ]


def _trainer_probes(s: Started) -> list[Probe]:
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"generateName": "addon-probe-"},
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": _pod_template()}}}]
                }
            }
        },
    }
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"generateName": "addon-probe-"},
        "spec": {"runtimeRef": {"name": "addon-probe-absent-runtime"}},
    }
    return [
        Probe(
            "Trainer's ClusterTrainingRuntime webhook",
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
            runtime,
        ),
        Probe(
            "Trainer's TrainJob webhooks (defaulting: runtimeRef.kind; validating: the runtime must exist)",
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs",
            trainjob,
            denied="addon-probe-absent-runtime",
        ),
    ]


def _kueue_probes(s: Started) -> list[Probe]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "addon-probe-", "labels": {"kueue.x-k8s.io/queue-name": "addon-probe"}},
        "spec": {"template": {"spec": {**_pod_template()["spec"], "restartPolicy": "Never"}}},
    }
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"generateName": "addon-probe-"},
        "spec": {},
    }
    return [
        Probe(
            "Kueue's Job webhook (a queued Job is suspended)",
            "/apis/batch/v1/namespaces/default/jobs",
            job,
            lambda a: _get(a, "spec", "suspend") is True,
        ),
        Probe("Kueue's ResourceFlavor webhooks", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors", flavor),
    ]


PROBES: dict[str, Callable[[Started], list[Probe]]] = {
    "jobset": _jobset_probes,
    "lws": _lws_probes,
    "trainer": _trainer_probes,
    "kueue": _kueue_probes,
}


def status(state: ClusterState) -> dict[str, Any]:
    """For `dev-cluster status`: each addon's version, pid, whether it runs, ports and log."""
    out = {}
    for name, info in state.addons.items():
        pid = state.pids.get(info.get("pid_name", ""))
        out[name] = {
            "version": info.get("version"),
            "running": bool(pid and running(pid, state.path)),
            "pid": pid,
            "webhook_port": info.get("webhook_port"),
            "health_port": info.get("health_port"),
            "metrics_port": info.get("metrics_port"),
            "log": info.get("log"),
        }
    return out
