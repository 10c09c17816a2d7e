"""Phalanx's own Kubernetes client: HTTP over aiohttp, JSON in and out, nothing generated.

Why not kubernetes-asyncio's client in the operator: importing anything under `kubernetes_asyncio.client`
runs its package `__init__`, which loads every generated model (~800 classes, ~34 MiB of RSS in every
replica), and its typed answers are parsed into those models and back (with Kopf's, 16 % of the
operator's CPU in a burst, by py-spy). Phalanx reads and writes plain JSON anyway, through a dozen
verbs, so this package gives exactly that: credentials as kubectl reads them (`credentials`), one
request with a deadline that raises on an error status (`client`), what a request asks of RBAC
(`access`), and the error types (`errors`).
"""

from phalanx.kubeclient.access import Access, AccessNotDeclaredError, access_of
from phalanx.kubeclient.client import ApiClient, resource_path
from phalanx.kubeclient.credentials import ConfigError, Credentials, load
from phalanx.kubeclient.errors import ApiException, ApiTimeoutError, namespace_terminating

__all__ = [
    "Access",
    "AccessNotDeclaredError",
    "ApiClient",
    "ApiException",
    "ApiTimeoutError",
    "ConfigError",
    "Credentials",
    "access_of",
    "load",
    "namespace_terminating",
    "resource_path",
]
