"""Read-only access to any cluster for the CLI tools, through kubernetes_asyncio's kubeconfig loader.

The loader does what kubectl does with a kubeconfig: the chosen context, bearer tokens and token files,
client certificates and keys (files or embedded `-data`), the cluster's CA (file or embedded), exec and
auth-provider plugins, `insecure-skip-tls-verify`, and `$KUBECONFIG` lists. Without any kubeconfig the
in-cluster service account is used. Every request is a GET; objects come back as plain dicts.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"
PAGE_SIZE = 500
REQUEST_TIMEOUT = 30.0


class KubeError(RuntimeError):
    """The cluster could not be read; the message says why, in one line."""


class NotFoundError(KubeError):
    pass


@dataclass
class Reader:
    """GETs against one cluster, with the kubeconfig's credentials."""

    api: client.ApiClient
    namespace: str
    """The context's namespace (kubectl's default for -n), else "default"."""
    server: str

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.api.call_api(
                path,
                "GET",
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                response_types_map={200: "object"},
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as e:
            message = _status_message(e)
            if e.status == 404:
                raise NotFoundError(message) from e
            raise KubeError(f"GET {path}: HTTP {e.status}: {message}") from e
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise KubeError(f"cannot reach the cluster at {self.server}: {e or type(e).__name__}") from e
        return result

    async def list(self, path: str, query: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every item of a collection, page by page."""
        items: list[dict[str, Any]] = []
        params = {**(query or {}), "limit": str(PAGE_SIZE)}
        while True:
            page = await self.get(path, params)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = token


def _status_message(e: ApiException) -> str:
    """The apiserver's Status message, else the HTTP reason."""
    try:
        body = json.loads(e.body) if e.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or e.reason or "error")


async def _load(kubeconfig: str | None, context: str | None) -> tuple[client.Configuration, str]:
    configuration = client.Configuration()
    files = kubeconfig or os.environ.get("KUBECONFIG") or ""
    default_file = Path.home() / ".kube" / "config"
    try:
        if files or default_file.is_file():
            loader = await config.load_kube_config(
                config_file=files or str(default_file),
                context=context,
                client_configuration=configuration,
                persist_config=False,  # a read-only tool never rewrites the user's kubeconfig
            )
            # kubernetes_asyncio keeps a tokenFile's trailing newline, which no header may carry; kubectl
            # (client-go) trims it.
            token = configuration.api_key.get("BearerToken")
            if isinstance(token, str):
                configuration.api_key["BearerToken"] = token.strip()
            current = loader.current_context or {}
            namespace = (current.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
            return configuration, namespace
        if context:
            raise KubeError(f"--context {context}: no kubeconfig ($KUBECONFIG and ~/.kube/config are unset)")
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as e:
        where = files or "in-cluster configuration (no $KUBECONFIG, no ~/.kube/config)"
        raise KubeError(f"cannot load {where}: {e}") from e
    except OSError as e:
        raise KubeError(f"cannot read kubeconfig {files}: {e}") from e
    try:
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        namespace = DEFAULT_NAMESPACE
    return configuration, namespace


@asynccontextmanager
async def connect(kubeconfig: str | None = None, context: str | None = None) -> AsyncIterator[Reader]:
    """A Reader for the kubeconfig (else $KUBECONFIG, else ~/.kube/config, else in-cluster)."""
    configuration, namespace = await _load(kubeconfig, context)
    async with client.ApiClient(configuration) as api:
        yield Reader(api, namespace, str(configuration.host))
