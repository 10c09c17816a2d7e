"""One HTTP request to the apiserver, with a deadline, raising on an error status; JSON in, raw or JSON out.

Every request has a deadline (`timeout` seconds, or the call's own, or an aiohttp.ClientTimeout for a
watch): aiohttp's total timeout covers connecting, sending and reading the whole answer, also a raw
answer's body read after the call returns, so a connection that never answers costs one deadline. No
answer in time is an ApiTimeoutError; an error status an ApiException with the answer's headers and body
(read here, so the connection goes back to the pool). Retrying is the caller's (controller/apply/kube.py).

Identity per request: the bearer token of the moment (a token file is re-read at most every minute, as
client-go does; an exec plugin's token is kept until it expires), or basic auth, or the client
certificate in the TLS context. A 401 with a token that can change (file, exec) refreshes it and tries
once more.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import time
import urllib.parse
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from phalanx.kubeclient import codec
from phalanx.kubeclient.access import Access, AccessNotDeclaredError, access_of
from phalanx.kubeclient.credentials import Credentials, ExecCredential
from phalanx.kubeclient.errors import ApiException, ApiTimeoutError

REQUEST_TIMEOUT_SECONDS = 5.0
TOKEN_FILE_REREAD_SECONDS = 60.0
CONNECTIONS = 100  # requests in flight at once (kubernetes-asyncio's default pool)
READ_BUFFER = 2**21  # a watch event of a large object exceeds aiohttp's default (etcd allows 1.5 MiB)
JSON = "application/json"

Query = Mapping[str, str] | Sequence[tuple[str, str]]
Timeout = float | aiohttp.ClientTimeout


def resource_path(
    group: str,
    version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or an object: core ("" group) under /api, the rest under /apis."""
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class ApiClient:
    """Requests to one cluster (module docstring). Make it in the event loop that uses it; close it there."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        connections: int = CONNECTIONS,
        user_agent: str = "phalanx",
        allowed: Collection[Access] | None = None,
    ) -> None:
        """`allowed`: the only accesses this client may make (kubeclient/access.py); None for any."""
        self.credentials = credentials
        self.allowed = allowed
        self.timeout = timeout
        self.connections = connections
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._proxy: str | None = None
        self._exec: ExecCredential | None = None
        self._exec_lock = asyncio.Lock()
        self._file_token: tuple[float, str | None] | None = None  # (read at, token)

    @property
    def server(self) -> str:
        return self.credentials.server

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: Timeout | None = None,
    ) -> aiohttp.ClientResponse:
        """The raw answer (read its body within the deadline); ApiException for an error status."""
        if self.allowed is not None and (access := access_of(method, path, query)) not in self.allowed:
            raise AccessNotDeclaredError(
                f"{method} {path} needs {access}, which this client does not declare"
            )
        data = None if body is None else body if isinstance(body, bytes | str) else codec.dumps(body)
        deadline = timeout if timeout is not None else self.timeout
        client_timeout = (
            deadline if isinstance(deadline, aiohttp.ClientTimeout) else aiohttp.ClientTimeout(total=deadline)
        )
        for attempt in (1, 2):
            session = await self._ensure_session(refresh=attempt == 2)
            headers = {"Accept": JSON, "User-Agent": self.user_agent}
            if data is not None:
                headers["Content-Type"] = content_type
            auth = self._authorization(refresh=attempt == 2)
            if auth:
                headers["Authorization"] = auth
            try:
                response = await session.request(
                    method,
                    self.credentials.server + path,
                    params=query,
                    data=data,
                    headers=headers,
                    timeout=client_timeout,
                    proxy=self._proxy,
                    server_hostname=self.credentials.tls_server_name,
                )
            except TimeoutError as e:  # also aiohttp's ServerTimeoutError and ConnectionTimeoutError
                seconds = f"{deadline:g} s" if isinstance(deadline, int | float) else "its deadline"
                raise ApiTimeoutError(f"{method} {path}: no answer within {seconds}") from e
            if response.status == 401 and attempt == 1 and self._token_can_change():
                response.release()
                continue
            if response.status >= 400:
                try:
                    text = await response.text()
                except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
                    text = ""
                finally:
                    response.release()
                raise ApiException(
                    response.status,
                    response.reason or "",
                    headers=dict(response.headers),
                    body=text,
                    method=method,
                    path=path,
                )
            return response
        raise AssertionError("unreachable")

    async def json(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: Timeout | None = None,
    ) -> Any:
        """The answer's JSON body (None for an empty one)."""
        response = await self.request(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        try:
            raw = await response.read()
        except TimeoutError as e:
            raise ApiTimeoutError(f"{method} {path}: the answer's body did not come in time") from e
        finally:
            response.release()
        return codec.loads(raw) if raw else None

    # ------------------------------------------------------------------ the connection and identity
    async def _ensure_session(self, *, refresh: bool) -> aiohttp.ClientSession:
        """The session; with an exec plugin, its credential first (run again when it expired or was
        refused). A new client certificate needs a new TLS context, so a new session."""
        creds = self.credentials
        if creds.exec is not None and (refresh or self._exec_due()):
            async with self._exec_lock:  # one run of the plugin for every request that found it due
                old = self._exec
                fresh = await creds.exec.run() if refresh or self._exec_due() else self._exec
                assert fresh is not None
                self._exec = fresh
                if self._session is not None and old is not None and old.certificate != fresh.certificate:
                    await self._session.close()
                    self._session = None
        if self._session is None:
            ssl_context = creds.ssl_context(self._exec) if creds.server.startswith("https:") else None
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=ssl_context or True)
            # The proxy is looked up once (the kubeconfig's proxy-url, else HTTPS_PROXY / HTTP_PROXY /
            # NO_PROXY for the server, as client-go's ProxyFromEnvironment), not by aiohttp's trust_env on
            # every request: that reads the environment and ~/.netrc in a worker thread twice per request,
            # two thread hand-offs on the path of every write (5 % of the operator's CPU at 5,000 nodes).
            self._proxy = creds.proxy_url or env_proxy(creds.server)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, read_bufsize=READ_BUFFER
            )
        return self._session

    def _exec_due(self) -> bool:
        return self._exec is None or self._exec.expired(dt.datetime.now(dt.UTC))

    def _token_can_change(self) -> bool:
        return bool(self.credentials.token_file or self.credentials.exec)

    def _authorization(self, *, refresh: bool) -> str | None:
        creds = self.credentials
        if self._exec is not None and self._exec.token:
            return f"Bearer {self._exec.token}"
        if creds.token:
            return f"Bearer {creds.token.strip()}"
        if creds.token_file:
            now = time.monotonic()
            if refresh or self._file_token is None or now - self._file_token[0] > TOKEN_FILE_REREAD_SECONDS:
                self._file_token = (now, creds.static_token())
            return f"Bearer {self._file_token[1]}" if self._file_token[1] else None
        if creds.username and creds.password is not None:
            pair = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
            return f"Basic {pair}"
        return None


def env_proxy(server: str) -> str | None:
    """The proxy the environment names for `server` (HTTPS_PROXY or HTTP_PROXY by its scheme, unless NO_PROXY
    excludes its host), as client-go's ProxyFromEnvironment and kubectl choose it; None: connect directly,
    as always to localhost and loopback addresses (Go's httpproxy never proxies those)."""
    host = urllib.parse.urlsplit(server).hostname
    if host is None or host == "localhost" or _loopback(host):
        return None
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies_environment().get(urllib.parse.urlsplit(server).scheme) or None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
