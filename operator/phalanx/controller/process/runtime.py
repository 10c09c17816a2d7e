"""The operator's process-wide pieces: API client, cache, scheduling loop, webhook server."""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import kopf

from phalanx import certs
from phalanx.api.admission_checks import DEFAULT_SCHEDULER, unmanaged_here
from phalanx.api.crdgen import crd_documents
from phalanx.controller import metrics
from phalanx.controller.apply.events import EventRecorder
from phalanx.controller.apply.kube import Kube, retrying
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.loop.scheduler import Scheduler
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.process.access import declared
from phalanx.controller.process.health import Health
from phalanx.controller.process.httpserver import HttpServer
from phalanx.controller.process.leader import KubeLeaseStore, LeaderElector, Timing
from phalanx.controller.process.looplag import watch_lag
from phalanx.controller.process.settings import DEFAULT_WEBHOOK_CONFIG_NAME, Settings
from phalanx.controller.process.webhook_tls import WebhookTLS
from phalanx.controller.watch.informer import ApiTransport, Informer
from phalanx.controller.watch.registry import WatchOnlyDiffBase, build_registry, reviewers
from phalanx.controller.watch.relist import Lister, Relister
from phalanx.controller.watch.review import Reviewer, answer
from phalanx.controller.watch.watched import INFORMER, KOPF, Watched, rows_for, served_by
from phalanx.controller.watch.webhooks import Webhooks
from phalanx.kubeclient import ApiClient, ApiException, Credentials, resource_path
from phalanx.kubeclient import load as load_credentials

log = logging.getLogger("phalanx.runtime")
MANAGED_WEBHOOK_CONFIG = DEFAULT_WEBHOOK_CONFIG_NAME  # --webhook-config-name's default
CERT_FILES = ("ca.crt", "tls.crt", "tls.key")
STOP_TIMEOUT = 3.0  # seconds the scheduling loop gets to end after its cancellation


def credentials(kubeconfig: str | None) -> Credentials:
    """The given kubeconfig, else in-cluster, else $KUBECONFIG/~/.kube/config."""
    return load_credentials(kubeconfig, in_cluster_first=True)


async def login_with(settings: Settings, /, **_: Any) -> kopf.ConnectionInfo:
    """Kopf's credentials from the same source as our client (an explicit kubeconfig wins), read anew at
    each login: Kopf logs in again when the apiserver refuses a token (a rotated service account token).

    `settings` is positional-only: Kopf passes its own `settings=` among the kwargs."""
    creds = credentials(settings.kubeconfig)
    token = creds.static_token()
    cert, key = creds.cert_data, creds.key_data
    if creds.exec is not None:
        answer = await creds.exec.run()
        token = answer.token or token
        cert, key = (answer.certificate, answer.key) if answer.certificate else (cert, key)
    return kopf.ConnectionInfo(
        server=creds.server,
        ca_path=creds.ca_file,
        ca_data=creds.ca_data,
        insecure=creds.insecure,
        token=token,
        username=creds.username,
        password=creds.password,
        certificate_path=None if cert else creds.cert_file,
        private_key_path=None if key else creds.key_file,
        certificate_data=cert,
        private_key_data=key,
        default_namespace=creds.namespace,
        proxy_url=creds.proxy_url,
    )


def ensure_webhook_certs(folder: Path, hosts: list[str]) -> None:
    """Use ca.crt, tls.crt and tls.key in `folder`; if none is there, make them (under a file lock, so
    replicas sharing the folder agree on one CA). Some but not all of them is an error. A folder that
    has all three may be read-only (a mounted Secret): it is only read."""
    if all((folder / name).is_file() for name in CERT_FILES):
        log.info("webhook certificate from %s", folder)
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".phalanx-certs.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        present = [name for name in CERT_FILES if (folder / name).is_file()]
        if len(present) == len(CERT_FILES):
            log.info("webhook certificate from %s", folder)
            return
        if present:
            missing = sorted(set(CERT_FILES) - set(present))
            raise RuntimeError(
                f"webhook cert dir {folder} has {', '.join(present)} but not {', '.join(missing)}"
            )
        ca = certs.make_ca("phalanx-webhook-ca")
        leaf = certs.issue(ca, "phalanx-webhook", hosts)
        ca.write(folder / "ca.crt", folder / "ca.key")
        leaf.write(folder / "tls.crt", folder / "tls.key")
        log.info("made a webhook CA and certificate in %s", folder)


class ObservedWebhookServer(kopf.WebhookServer):
    """Kopf's webhook server, telling readiness once it listens (it yields its config after that), answering
    the reviews of `reviewers` directly (watch/review.py: Kopf's per-review machinery cost ~3x the handler),
    and timing every review (metrics.WEBHOOK_REVIEW)."""

    on_listening: Callable[[], None] = staticmethod(lambda: None)
    reviewers: Mapping[str, Reviewer] = MappingProxyType({})

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async def timed(request: Any, *, webhook: Any = None, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                reviewer = self.reviewers.get(str(webhook or ""))
                answered = None if reviewer is None else await answer(request, reviewer)
                return answered if answered is not None else await fn(request, webhook=webhook, **kwargs)
            finally:
                metrics.WEBHOOK_REVIEW.labels(str(webhook or "")).observe(time.perf_counter() - started)

        async for client_config in super().__call__(timed):
            self.on_listening()
            yield client_config


async def list_items(call: Callable[[], Awaitable[Any]]) -> list[dict[str, Any]]:
    """A LIST, retried like every call (a 403 or 500 is an ApiException, retried when transient)."""

    async def once() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await call())["items"]
        return items

    return await retrying(once, verb="list")


class Runtime:
    def __init__(self) -> None:
        self.settings = Settings()
        self.health = Health(self.settings.stale_after_seconds)
        self.cache = ClusterCache()
        metrics.CACHE_OBJECTS.labels("Node").set_function(lambda: len(self.cache.nodes))
        metrics.CACHE_OBJECTS.labels("Pod").set_function(lambda: len(self.cache.pods))
        self.api: ApiClient | None = None
        self.kube: Kube | None = None
        self.recorder: EventRecorder | None = None
        self._warned_outside: set[str] = set()  # owners outside --namespaces already warned about
        self.scheduler: Scheduler | None = None
        self._task: asyncio.Task[None] | None = None
        self._election: asyncio.Task[None] | None = None
        self._http: HttpServer | None = None
        self._certdir: tempfile.TemporaryDirectory[str] | None = None
        self.tls: WebhookTLS | None = None
        self._tls_task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self.relister: Relister | None = None
        self.informers: dict[str, Informer] = {}  # kind -> its list-then-watch (watch/informer.py)
        # The admission handlers over this runtime: registered with Kopf and answering reviews directly.
        self.webhooks = Webhooks(self)

    def configure(self, settings: Settings) -> None:
        self.settings = settings
        self.health.stale_after = settings.stale_after_seconds
        self.health.lease = settings.lease_name
        if not settings.serves_webhooks:
            self.health.mark_webhook_started()  # --role controller: no webhook server to wait for

    @property
    def rows(self) -> tuple[Watched, ...]:
        """The kinds this process watches: all of them, or (--role webhooks) what the reviews read."""
        return rows_for(webhooks_only=not self.settings.runs_loop)

    def registry(self) -> kopf.OperatorRegistry:
        """Every handler of this operator on a registry of its own: the watches and webhooks over this
        runtime (watch/registry.py), and the process's login, startup and cleanup."""
        registry = build_registry(
            self,
            rows=served_by(KOPF, self.settings.informers, self.rows),
            hooks=self.webhooks,
            serve_webhooks=self.settings.serves_webhooks,
        )
        settings = self.settings

        async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return await login_with(settings, **kwargs)

        async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
            await self.start(settings)

        async def cleanup(**_: Any) -> None:
            await self.stop()

        kopf.on.login(registry=registry)(login)
        kopf.on.startup(registry=registry)(startup)
        kopf.on.cleanup(registry=registry)(cleanup)
        return registry

    async def start(self, kopf_settings: kopf.OperatorSettings) -> None:
        if self.settings.metrics_enabled:
            # First, so probes answer (not ready yet) while the CRDs and the cache come up.
            self._http = HttpServer(self.health, self.settings.metrics_host, self.settings.metrics_port)
            await self._http.start()
        self._lag_task = asyncio.create_task(
            watch_lag(metrics.EVENT_LOOP_LAG.observe), name="phalanx-event-loop-lag"
        )
        self.api = ApiClient(
            credentials(self.settings.kubeconfig),
            timeout=self.settings.api_timeout_seconds,
            allowed=declared(self.settings),
        )
        self.kube = Kube(self.api)
        self.recorder = EventRecorder(self.api, instance=self.settings.identity)
        if self.settings.serves_webhooks:
            folder = self._webhook_cert_folder()
            if self.settings.webhook_secret:
                await self._start_webhook_tls(folder)
            self._configure_kopf_webhooks(kopf_settings, folder)
        self._configure_kopf(kopf_settings)
        if self.settings.install_crds:
            await install_crds(self.api)
        self.health.mark_crds_installed()
        self.informers = {
            row.kind: Informer(
                row, self.cache, ApiTransport(self.api, row, self.settings.api_list_timeout_seconds)
            )
            for row in served_by(INFORMER, self.settings.informers, self.rows)
        }
        await self._prime_cache()
        for informer in self.informers.values():
            informer.start()  # watching from its priming list's resourceVersion
        self.relister = Relister(self.cache, {row.kind: self._served_lister(row) for row in self.rows})
        # What priming made (every node's and pod's record, the imported modules) lives as long as the
        # process or until its object changes, and none of it holds a reference cycle (records are frozen
        # dataclasses; a replaced one is freed by its count): frozen, the collector's full passes no longer
        # walk it. Unfrozen, each full pass walked the whole cache: 60-100 ms at 1,000 nodes, one of them
        # on the way to a burst's first pod; more with every node (docs/performance.md).
        gc.freeze()
        log.info("cache primed: %d objects left out of full garbage collections", gc.get_freeze_count())
        self.health.mark_cache_primed()
        if not self.settings.runs_loop:
            log.info("serving the webhooks only (--role webhooks): %d nodes cached", len(self.cache.nodes))
            return
        if self.settings.leader_election:
            self._start_election()
            return
        self.start_loop()
        log.info(
            "scheduling loop started with %d nodes, %d pods, %d managed jobs",
            len(self.cache.nodes),
            len(self.cache.pods),
            self._owners(),
        )

    def _owners(self) -> int:
        return sum(len(owners) for owners in self.cache.owners.values())

    # ------------------------------------------------------------------ leader election
    def _start_election(self) -> None:
        """Watches, cache and webhook run on every replica; the loop only while this one holds the Lease."""
        assert self.api is not None
        s = self.settings
        lease = f"Lease {s.lease_namespace}/{s.lease_name}"
        elector = LeaderElector(
            KubeLeaseStore(self.api, s.lease_namespace, s.lease_name),
            s.identity,
            self._lead,
            Timing(s.lease_duration_seconds, s.renew_deadline_seconds, s.retry_period_seconds),
            describe=lease,
        )
        self._election = asyncio.create_task(elector.run(), name="phalanx-leader-election")
        log.info("cache primed; competing for %s as %s", lease, s.identity)

    async def _lead(self) -> None:
        """The leader's work: the loop on the warm cache, until the elector cancels this."""
        self.cache.changed.set()  # a first pass at once
        self.start_loop()
        log.info("scheduling loop started (leader) with %d managed jobs", self._owners())
        try:
            if self._task is not None:
                await self._task
        finally:
            await self.stop_loop()

    # ------------------------------------------------------------------ the scheduling loop
    def start_loop(self) -> None:
        """Start the scheduling loop (at start, or when this replica becomes the leader)."""
        assert self.kube is not None and self.recorder is not None
        if self._task is not None and not self._task.done():
            return
        self.scheduler = Scheduler(
            self.cache,
            self.kube,
            self.recorder,
            self.health.pass_done,
            resync=self.settings.resync_seconds,
            debounce=self.settings.debounce_seconds,
            node_failure_grace=self.settings.node_failure_grace,
            starvation_age=self.settings.starvation_age,
            bind_timeout=self.settings.bind_timeout,
            pipeline=True,  # setup applied beside the passes (loop/scheduler.py)
            verify_incremental=self.settings.verify_incremental,
            plan_thread=self.settings.plan_thread,
        )
        self.health.loop_started()
        self._task = asyncio.create_task(self.scheduler.run(), name="phalanx-scheduler")

    async def stop_loop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Cancel the loop and wait (boundedly) for it to end; a decision is recorded before any pod is
        released, so a cancelled pass is finished by the next leader or restart."""
        self.health.loop_stopped()
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            log.warning("the scheduling loop did not end %.0f s after its cancellation", timeout)
        elif not task.cancelled() and task.exception() is not None:
            log.warning("the scheduling loop had failed: %r", task.exception())

    # ------------------------------------------------------------------ webhook TLS
    async def _start_webhook_tls(self, folder: Path) -> None:
        """The certificate from the Secret (made or renewed first if due) into `folder`, the CA into our
        own webhook configurations when they are installed with Phalanx; then checked every minute."""
        s = self.settings
        assert self.api is not None and s.webhook_secret is not None
        self.tls = WebhookTLS(
            self.api,
            s.webhook_namespace,
            s.webhook_secret,
            s.webhook_hosts(),
            folder,
            inject_into=None if s.kopf_manages_webhooks else s.webhook_config_name,
        )
        await self.tls.ensure()
        self._tls_task = asyncio.create_task(self.tls.run(), name="phalanx-webhook-tls")

    # ------------------------------------------------------------------ Kopf
    def _configure_kopf_webhooks(self, settings: kopf.OperatorSettings, folder: Path) -> None:
        server = ObservedWebhookServer(
            addr=self.settings.webhook_host,
            port=self.settings.webhook_port,
            host=self.settings.webhook_host,
            certfile=str(folder / "tls.crt"),
            pkeyfile=str(folder / "tls.key"),
            cafile=str(folder / "ca.crt"),
        )
        server.on_listening = self.health.mark_webhook_started
        server.reviewers = reviewers(self.webhooks)
        settings.admission.server = server
        # Kopf writes the configurations (a url to this process) unless they come with the chart.
        settings.admission.managed = (
            self.settings.webhook_config_name if self.settings.kopf_manages_webhooks else None
        )

    def _configure_kopf(self, settings: kopf.OperatorSettings) -> None:
        settings.persistence.diffbase_storage = WatchOnlyDiffBase()  # its watches are all on.event
        settings.posting.level = logging.WARNING
        settings.posting.reporting_component = "phalanx"
        settings.posting.reporting_instance = self.settings.identity
        settings.watching.connect_timeout = 10
        settings.networking.request_timeout = 30

    def _webhook_cert_folder(self) -> Path:
        """Where Kopf's server reads the certificate: --webhook-cert-dir, else a temporary folder. Its
        files are made here, unless the --webhook-secret's content is written there."""
        if self.settings.webhook_cert_dir:
            folder = Path(self.settings.webhook_cert_dir)
        else:
            self._certdir = tempfile.TemporaryDirectory(prefix="phalanx-webhook-")
            folder = Path(self._certdir.name)
        if not self.settings.webhook_secret:
            ensure_webhook_certs(folder, self.settings.webhook_hosts())
        return folder

    def _lister(self, row: Watched) -> Lister:
        """A raw LIST of every object of a watched kind (all namespaces)."""
        assert self.api is not None
        r = row.resource
        path = resource_path(r.group, r.version, r.plural)
        api = self.api
        deadline = self.settings.api_list_timeout_seconds

        async def call() -> Any:
            return await api.json("GET", path, timeout=deadline)

        return lambda: list_items(call)

    def _served_lister(self, row: Watched) -> Lister:
        return lambda: self._list_served(row)

    # ------------------------------------------------------------------ WatchContext (watch/webhooks.py)
    @property
    def cache_primed(self) -> bool:
        return self.health.cache_primed

    def watches(self, namespace: str) -> bool:
        return self.settings.watches(namespace)

    async def outside(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        if not uid or uid in self._warned_outside or self.recorder is None:
            return
        message = unmanaged_here(body, namespace, self.settings.namespaces)
        if message is None:
            return
        self._warned_outside.add(uid)
        api_version = str(body.get("apiVersion") or "")
        ref = ObjectRef(api_version, kind, namespace, str(meta.get("name") or ""), uid)
        await self.recorder.post(ref, "Warning", "NotManagedHere", message)

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        return (DEFAULT_SCHEDULER, *(n for n in self.settings.scheduler_names if n != DEFAULT_SCHEDULER))

    def listed(self, kind: str) -> None:
        """A handler got an object of `kind` from one of Kopf's listings, which miss deletions (relist.py)."""
        if self.relister is not None:
            self.relister.listed(kind)

    async def _list_served(self, row: Watched) -> list[dict[str, Any]]:
        """A watched kind's objects; none (said once) for an optional kind whose CRD is not installed: Phalanx
        runs without it, and Kopf starts watching it when the CRD appears."""
        try:
            return await self._lister(row)()
        except ApiException as e:
            if e.status != 404 or not row.optional:
                raise
            r = row.resource
            log.warning(
                "%s.%s is not served by this cluster: %ss are not admitted until its CRD is installed",
                r.plural,
                r.group,
                row.kind,
            )
            return []

    async def _prime_cache(self) -> None:
        """One consistent LIST of every watched kind before the first pass (watched.py's phases in order),
        so no pass decides on an empty view."""
        for phase in sorted({row.phase for row in self.rows}):
            rows = [row for row in self.rows if row.phase == phase]
            listed = await asyncio.gather(*(self._prime_list(row) for row in rows))
            for row, items in zip(rows, listed, strict=True):
                for item in items:
                    namespace = str((item.get("metadata") or {}).get("namespace") or "")
                    if row.owner and not self.settings.watches(namespace):
                        continue
                    r = row.resource
                    item.setdefault("apiVersion", r.api_version)
                    item.setdefault("kind", row.kind)
                    self.cache.upsert(row.kind, item)

    async def _prime_list(self, row: Watched) -> list[dict[str, Any]]:
        """A row's objects for the priming; an informer's row goes into the cache by its own (paged) list,
        whose resourceVersion its watch starts from (nothing left here)."""
        informer = self.informers.get(row.kind)
        if informer is None:
            return await self._list_served(row)
        await informer.relist()
        return []

    async def stop(self) -> None:
        """Bounded: the loop is cancelled, the servers closed; only the Lease's release waits on the
        apiserver (at most 2 s)."""
        if self._election is not None:
            self._election.cancel()  # stops the loop, then releases the Lease
            await asyncio.wait({self._election})
        await self.stop_loop()
        for task in (self._tls_task, self._lag_task):
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
        if self.relister is not None:
            await self.relister.stop()
        for informer in self.informers.values():
            await informer.stop()
        if self._http is not None:
            await self._http.stop()
        if self.api is not None:
            await self.api.close()
        if self._certdir is not None:
            self._certdir.cleanup()


async def install_crds(api: ApiClient, timeout: float = 30.0) -> None:
    """Server-side apply the generated CRDs and wait until the apiserver serves them."""
    for crd in crd_documents():
        path = _crd_path(crd["metadata"]["name"])
        await retrying(
            lambda crd=crd, path=path: api.json(  # type: ignore[misc]
                "PATCH",
                path,
                query={"fieldManager": "phalanx", "force": "true"},
                body=crd,  # JSON is YAML
                content_type="application/apply-patch+yaml",
            ),
            verb="patch",
        )
    deadline = asyncio.get_running_loop().time() + timeout
    for crd in crd_documents():
        name = crd["metadata"]["name"]
        while True:
            conditions = await retrying(lambda name=name: _crd_conditions(api, name), verb="get")  # type: ignore[misc]
            if any(x["type"] == "Established" and x["status"] == "True" for x in conditions):
                break
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"CRD {name} not established after {timeout:.0f} s")
            await asyncio.sleep(0.2)


def _crd_path(name: str) -> str:
    return resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions", name=name)


async def _crd_conditions(api: ApiClient, name: str) -> list[dict[str, Any]]:
    """A CRD's status conditions; an error answer (429, 5xx) is an ApiException, retried like every call."""
    crd = await api.json("GET", _crd_path(name))
    conditions: list[dict[str, Any]] = (crd.get("status") or {}).get("conditions") or []
    return conditions
