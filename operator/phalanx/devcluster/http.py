"""A tiny synchronous Kubernetes REST client for bringing the dev cluster up (no client library needed)."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from typing import Any


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class RestClient:
    """One keep-alive HTTPS connection per thread to 127.0.0.1:port, bearer-token auth."""

    def __init__(self, port: int, token: str, ca_file: str) -> None:
        self.port = port
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file)
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)
            self.local.conn = conn
        return conn

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read().decode()
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if response.status >= 400:
                raise ApiError(response.status, data)
            if not data:
                return None
            if "json" in (response.getheader("Content-Type") or ""):
                return json.loads(data)
            return data
        return None

    def get(self, path: str) -> Any:
        return self.request("GET", path)
