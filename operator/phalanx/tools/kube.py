"""Read-only access to any cluster for the CLI tools, through phalanx.kubeclient's kubeconfig loader.

The loader does what kubectl does with a kubeconfig: the chosen context, bearer tokens and token files,
client certificates and keys (files or embedded `-data`), the cluster's CA (file or embedded), exec
plugins, `insecure-skip-tls-verify`, and `$KUBECONFIG` lists. Without any kubeconfig the in-cluster
service account is used. Every request is a GET; objects come back as plain dicts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from phalanx.kubeclient import ApiClient, ApiException, ConfigError, load

PAGE_SIZE = 500
REQUEST_TIMEOUT = 30.0


class KubeError(RuntimeError):
    """The cluster could not be read; the message says why, in one line."""


class NotFoundError(KubeError):
    pass


@dataclass
class Reader:
    """GETs against one cluster, with the kubeconfig's credentials."""

    api: ApiClient
    namespace: str
    """The context's namespace (kubectl's default for -n), else "default"."""
    server: str

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.api.json("GET", path, query=dict(query or {}))
        except ApiException as e:
            message = e.status_message()
            if e.status == 404:
                raise NotFoundError(message) from e
            raise KubeError(f"GET {path}: HTTP {e.status}: {message}") from e
        except ConfigError as e:  # an exec plugin that failed
            raise KubeError(str(e)) from e
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


@asynccontextmanager
async def connect(kubeconfig: str | None = None, context: str | None = None) -> AsyncIterator[Reader]:
    """A Reader for the kubeconfig (else $KUBECONFIG, else ~/.kube/config, else in-cluster)."""
    try:
        credentials = load(kubeconfig, context, in_cluster_first=False)
    except ConfigError as e:
        raise KubeError(str(e)) from e
    async with ApiClient(credentials, timeout=REQUEST_TIMEOUT, user_agent="phalanx-tools") as api:
        yield Reader(api, credentials.namespace, credentials.server)
