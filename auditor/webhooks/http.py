"""Where a webhook may point, and one POST to it, bounded in every direction.

A webhook URL is ``http`` or ``https``, names a host, holds no user name or password
and is at most :data:`MAX_URL_LENGTH` characters. Unless private destinations are
allowed (``AUDITOR_WEBHOOK_ALLOW_PRIVATE``), a delivery refuses hosts that resolve to
loopback, private, link-local (cloud metadata), shared, reserved or multicast addresses;
the check is made on the addresses actually connected to, so a name that resolves
differently between the check and the connection (DNS rebinding) cannot slip through.

A POST connects and reads within :data:`TIMEOUT` seconds per step, follows no
redirect (a 3xx is a failed attempt), goes through no proxy, and reads at most
:data:`MAX_RESPONSE_BYTES` of the answer, of which the first few hundred characters
are kept for the delivery log.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["MAX_RESPONSE_BYTES", "MAX_URL_LENGTH", "TIMEOUT", "Answer", "RefusedDestination", "check_destination",
           "connect", "is_internal", "post", "validate_url"]

log = logging.getLogger(__name__)

MAX_URL_LENGTH = 2000
_WEBHOOK_OPT_IN = "AUDITOR_WEBHOOK_ALLOW_PRIVATE=true"
MAX_RESPONSE_BYTES = 64 << 10
TIMEOUT = 10.0
_KEPT = 300


class RefusedDestination(ValueError):
    """The URL is not one a webhook may be sent to (the message says why)."""


def is_internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, private, link-local, shared (100.64/10), reserved, multicast or unspecified."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast
            or ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address)
                                     and ip in ipaddress.ip_network("100.64.0.0/10")))


def validate_url(url: str, *, allow_private: bool, opt_in: str = _WEBHOOK_OPT_IN) -> str:
    """``url`` if a webhook may point there, else :class:`RefusedDestination` saying why.

    Only a literal IP address can be judged here; host names are judged when a delivery
    connects (their addresses may change).
    """
    if not isinstance(url, str) or not url.strip():
        raise RefusedDestination("the URL is empty")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise RefusedDestination(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise RefusedDestination("the URL holds spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedDestination(f"the URL is malformed ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise RefusedDestination("the URL must start with http:// or https://")
    if not parts.hostname:
        raise RefusedDestination("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise RefusedDestination("the URL must not hold a user name or password (the requests are signed)")
    if port == 0:
        raise RefusedDestination("the URL's port must be between 1 and 65535")
    if parts.fragment:
        raise RefusedDestination("the URL must not have a #fragment")
    try:
        ip = ipaddress.ip_address(parts.hostname)
    except ValueError:
        ip = None
    if ip is not None and not allow_private and is_internal(ip):
        raise RefusedDestination(f"{ip} is a loopback, private or link-local address; such destinations are "
                                 f"refused unless {opt_in}")
    if not allow_private and parts.hostname.lower().rstrip(".") in ("localhost", "localhost.localdomain"):
        raise RefusedDestination(f"localhost is refused unless {opt_in}")
    return url


def _refuse_internal(host: str, infos, opt_in: str) -> None:
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if is_internal(ip):
            # The address stays in the server's log: the delivery log that admins read must
            # not become a way to look up internal names (what resolves to what, inside).
            log.warning("destination %s resolves to internal address %s: refused", host, ip)
            raise RefusedDestination(f"{host} resolves to a loopback, private or link-local address; "
                                     f"refused unless {opt_in}")


def check_destination(url: str, *, allow_private: bool, opt_in: str = _WEBHOOK_OPT_IN) -> str:
    """:func:`validate_url`, and the addresses the host resolves to now: none may be internal
    (unless ``allow_private``). For destinations configured once and reached later (the
    connectors); ``opt_in`` names the setting that allows internal ones."""
    url = validate_url(url, allow_private=allow_private, opt_in=opt_in)
    if not allow_private:
        parts = urlsplit(url)
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                                       type=socket.SOCK_STREAM)
        except OSError as exc:
            raise RefusedDestination(f"{parts.hostname} does not resolve ({exc.__class__.__name__})") from None
        _refuse_internal(parts.hostname, infos, opt_in)
    return url


def connect(host: str, port: int, timeout: float, allow_private: bool) -> socket.socket:
    """A connected socket to one of ``host``'s addresses that passes the destination check."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} has no address")
    if not allow_private:
        _refuse_internal(host, infos, _WEBHOOK_OPT_IN)
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"could not connect to {host}")


class _HTTP(http.client.HTTPConnection):
    allow_private = False

    def connect(self) -> None:
        self.sock = connect(self.host, self.port, self.timeout, self.allow_private)


class _HTTPS(http.client.HTTPSConnection):
    allow_private = False

    def connect(self) -> None:
        sock = connect(self.host, self.port, self.timeout, self.allow_private)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


@dataclass(frozen=True)
class Answer:
    """One attempt: the receiver's status (None when there was no answer), or the error."""

    status: int | None
    error: str | None
    duration_ms: float
    #: Worth trying again later (False: the destination is refused outright).
    retry: bool = True
    #: Taken by a receiver that does not speak HTTP (an SMTP relay answers 250, not 2xx).
    sent: bool = False

    @property
    def ok(self) -> bool:
        return self.sent or (self.status is not None and 200 <= self.status < 300)


def post(url: str, body: bytes, headers: dict[str, str], *, allow_private: bool,
         timeout: float = TIMEOUT) -> Answer:
    """POST ``body`` to ``url``; never raises."""
    t0 = time.perf_counter()

    def done(status: int | None, error: str | None, retry: bool = True) -> Answer:
        return Answer(status, error, round((time.perf_counter() - t0) * 1000, 1), retry)

    try:
        url = validate_url(url, allow_private=allow_private)
    except RefusedDestination as exc:
        return done(None, str(exc), retry=False)
    parts = urlsplit(url)
    cls = _HTTPS if parts.scheme == "https" else _HTTP
    kwargs = {"context": ssl.create_default_context()} if cls is _HTTPS else {}
    conn = cls(parts.hostname, parts.port, timeout=timeout, **kwargs)
    conn.allow_private = allow_private
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", target, body=body, headers={**headers, "Content-Length": str(len(body))})
        response = conn.getresponse()
        text = response.read(MAX_RESPONSE_BYTES)[:_KEPT].decode("utf-8", "replace")
        status = response.status
    except RefusedDestination as exc:
        return done(None, str(exc), retry=False)
    except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
        return done(None, f"{exc.__class__.__name__}: {exc}"[:_KEPT])
    finally:
        conn.close()
    if 200 <= status < 300:
        return done(status, None)
    if 300 <= status < 400:
        return done(status, "redirects are not followed: point the webhook at the final URL")
    return done(status, f"HTTP {status}" + (f": {text.strip()}" if text.strip() else ""))
