# -*- coding: utf-8 -*-
"""HTTP to the Hub, its file server or a fleet peer: ranged GETs over a small keep-alive pool with the environment's
proxies (fleet peers never through one), and the walk from a resolve URL to the URL that serves the bytes."""
from __future__ import absolute_import, division, print_function

import http.client
import threading
import urllib.parse
import urllib.request

from ansible.module_utils.hf.fetch_errors import UpstreamError


class Upstream:
    """Ranged GETs against the Hub / its file server, with a small keep-alive connection pool and env proxies."""

    def __init__(self, token=None, timeout=60.0, direct_hosts=()):
        self.token = token
        self.timeout = timeout
        self.lock = threading.Lock()
        self.pool = {}
        self.proxies = urllib.request.getproxies()
        self.direct_hosts = set(direct_hosts)  # fleet peers: never through a proxy

    def _new_conn(self, scheme, netloc):
        conn, absolute = self._make_conn(scheme, netloc)
        conn.hf_absolute = absolute
        return conn

    def _make_conn(self, scheme, netloc):
        host, _, port = netloc.rpartition(":") if netloc.count(":") == 1 else (netloc, "", "")
        port = int(port) if port else (443 if scheme == "https" else 80)
        host = host or netloc
        proxy = None if host.strip("[]") in self.direct_hosts or urllib.request.proxy_bypass(host) \
            else self.proxies.get(scheme)
        if proxy:
            p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if scheme == "https":
                conn = http.client.HTTPSConnection(p.hostname, p.port or 80, timeout=self.timeout)
                conn.set_tunnel(host, port)
                return conn, False
            return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=self.timeout), True
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return cls(host, port, timeout=self.timeout), False

    def _get_conn(self, scheme, netloc):
        with self.lock:
            free = self.pool.get((scheme, netloc))
            if free:
                return free.pop()
        return self._new_conn(scheme, netloc)

    def _put_conn(self, scheme, netloc, conn):
        with self.lock:
            self.pool.setdefault((scheme, netloc), []).append(conn)

    def request(self, method, url, headers, auth=False):
        """-> (conn_key, conn, response). The caller reads the body, then release()s or discards the conn."""
        u = urllib.parse.urlsplit(url)
        target = u.path + ("?" + u.query if u.query else "")
        h = {"User-Agent": "sglang-deploy-hf_model/1"}
        h.update(headers)
        token = auth if isinstance(auth, str) else (self.token if auth else None)
        if token:
            h["Authorization"] = "Bearer %s" % token
        for attempt in (0, 1):
            conn = self._get_conn(u.scheme, u.netloc)
            try:
                conn.request(method, url if conn.hf_absolute else target, headers=h)
                return (u.scheme, u.netloc), conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()  # a stale keep-alive connection: retry once on a fresh one
                if attempt:
                    raise
        raise UpstreamError("unreachable")

    def release(self, key, conn, resp):
        if resp.will_close:
            conn.close()
        else:
            self._put_conn(key[0], key[1], conn)

    def close(self):
        with self.lock:
            for conns in self.pool.values():
                for c in conns:
                    c.close()
            self.pool = {}

    def locate(self, url, size):
        """Follow the resolve URL's same-host redirects (HEAD, token sent) to the URL that serves the bytes. A
        cross-host redirect (the LFS file server / CDN) ends the walk: that URL is fetched without the token."""
        origin = urllib.parse.urlsplit(url).netloc
        for _ in range(6):
            key, conn, resp = self.request("HEAD", url, {}, auth=urllib.parse.urlsplit(url).netloc == origin)
            resp.read()
            self.release(key, conn, resp)
            if resp.status in (301, 302, 303, 307, 308):
                linked = resp.getheader("X-Linked-Size")
                if linked is not None and linked.isdigit() and int(linked) != size:
                    raise UpstreamError("size lie: tree says %d bytes, resolve says X-Linked-Size %s" % (size, linked),
                                        fatal=True)
                nxt = urllib.parse.urljoin(url, resp.getheader("Location") or "")
                if urllib.parse.urlsplit(nxt).netloc != origin:
                    return nxt, False
                url = nxt
                continue
            if resp.status == 200:
                length = resp.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) != size:
                    raise UpstreamError("size lie: tree says %d bytes, server says Content-Length %s" % (size, length),
                                        fatal=True)
                return url, True
            if resp.status == 429 or resp.status >= 500:
                raise UpstreamError("HEAD %s: HTTP %d" % (url.split("?")[0], resp.status),
                                    retry_after=retry_after_seconds(resp.getheader("Retry-After")))
            raise UpstreamError("HEAD %s: HTTP %d %s" % (url.split("?")[0], resp.status,
                                                        resp.getheader("X-Error-Code") or ""),
                                fatal=resp.status in (401, 403, 404, 410))
        raise UpstreamError("too many redirects for %s" % url, fatal=True)


def retry_after_seconds(v):
    """A Retry-After header as seconds (None when absent or not a number)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def response_socket(resp):
    """The socket under an http.client response (None when unknown), to be shut when its job is aborted."""
    fp = getattr(resp, "fp", None)
    raw = getattr(fp, "raw", None)
    return getattr(raw, "_sock", None)
