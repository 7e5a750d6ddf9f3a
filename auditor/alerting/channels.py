"""One message to one alert channel, bounded and through the webhooks' outgoing-address filter.

A message is stored with its delivery as JSON (``{"subject", "alerts": [...]}``, see
:func:`auditor.alerting.routing.message`) and rendered when sent, with links that start
with ``AUDITOR_BASE_URL`` when it is set:

- an ``email`` channel sends a plain-text mail to its recipients through the deployment's
  SMTP relay (``AUDITOR_SMTP_HOST`` and its neighbours), with the standard library's ``smtplib``; the relay is
  reached through the same address filter as the webhooks (a relay on a loopback or
  private address needs ``AUDITOR_WEBHOOK_ALLOW_PRIVATE=true``);
- a ``slack`` channel POSTs ``{"text": ...}`` to its incoming webhook (Slack, Mattermost,
  Rocket.Chat and others take that shape) with :func:`auditor.webhooks.http.post`.
"""

from __future__ import annotations

import functools
import json
import re
import smtplib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from auditor.addresses import valid_address
from auditor.webhooks.deliveries import ChannelTarget
from auditor.webhooks.http import TIMEOUT, Answer, RefusedDestination, connect, post

__all__ = ["MAX_RECIPIENTS", "Smtp", "Target", "render_text", "send", "sender", "valid_address"]

MAX_RECIPIENTS = 20
_KEPT = 300


@dataclass(frozen=True)
class Smtp:
    """The deployment's SMTP relay (``AUDITOR_SMTP_HOST`` and its neighbours); ``host`` empty: none."""

    host: str = ""
    port: int = 587
    security: str = "starttls"  # "starttls", "tls" (implicit) or "none"
    user: str = ""
    password: str = ""
    sender: str = "auditor@localhost"

    @classmethod
    def from_settings(cls, w) -> Smtp:
        return cls(w.smtp_host, w.smtp_port, w.smtp_security, w.smtp_user, w.smtp_password, w.smtp_from)


#: What a channel delivery needs to know of its channel (defined with the outbox that reads it).
Target = ChannelTarget


def sender(smtp: Smtp, base_url: str | None = None) -> Callable[..., Answer]:
    """:func:`send` with the deployment's relay and links bound: the outbox's channel sender."""
    return functools.partial(send, smtp=smtp, base_url=base_url)


def _clean(text: str, limit: int) -> str:
    """One line of text: control characters (a header's line breaks among them) become spaces."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text or "").strip()[:limit]


def _link(base_url: str | None, path: str) -> str | None:
    return f"{base_url}{path}" if base_url else None


def render_text(message: dict[str, Any], base_url: str | None) -> str:
    """The plain text of a message: one paragraph per alert."""
    out = []
    for a in message.get("alerts", []):
        head = f"[{a.get('severity', '')}] {str(a.get('kind', '')).replace('_', ' ')}"
        if a.get("subject"):
            head += f": {a['subject']}"
        lines = [head, str(a.get("message", ""))]
        if a.get("dataset"):
            lines.append(f"dataset: {a['dataset']}")
        link = _link(base_url, a.get("path", ""))
        lines.append(link or f"alert {a.get('id')} ({a.get('path', '')})")
        out.append("\n".join(lines))
    if message.get("note"):
        out.append(str(message["note"]))
    return "\n\n".join(out)


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_text(message: dict[str, Any], base_url: str | None) -> str:
    lines = [f"*{_slack_escape(message.get('subject', 'Auditor'))}*"]
    for a in message.get("alerts", []):
        what = f"[{a.get('severity', '')}] {str(a.get('kind', '')).replace('_', ' ')}"
        if a.get("subject"):
            what += f": {a['subject']}"
        link = _link(base_url, a.get("path", ""))
        title = f"<{link}|{_slack_escape(what)}>" if link else _slack_escape(what)
        dataset = f" (dataset {_slack_escape(a['dataset'])})" if a.get("dataset") else ""
        lines.append(f"• {title}{dataset}: {_slack_escape(str(a.get('message', '')))}")
    if message.get("note"):
        lines.append(_slack_escape(str(message["note"])))
    return "\n".join(lines)


class _SMTP(smtplib.SMTP):
    """smtplib's client, connecting through the outgoing-address filter."""

    def __init__(self, *, allow_private: bool, timeout: float):
        self._allow_private = allow_private
        super().__init__(timeout=timeout)

    def _get_socket(self, host, port, timeout):
        return connect(host, port, timeout, self._allow_private)


class _SMTPS(smtplib.SMTP_SSL):
    """The same over implicit TLS (port 465)."""

    def __init__(self, *, allow_private: bool, timeout: float):
        self._allow_private = allow_private
        super().__init__(timeout=timeout, context=ssl.create_default_context())

    def _get_socket(self, host, port, timeout):
        sock = connect(host, port, timeout, self._allow_private)
        return self.context.wrap_socket(sock, server_hostname=self._host)


def _mail(target: Target, message: dict[str, Any], smtp: Smtp, base_url: str | None) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"] = _clean(message.get("subject", "Auditor alerts"), 200)
    mail["From"] = smtp.sender
    mail["To"] = ", ".join(target.recipients)
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = make_msgid(domain=smtp.sender.rpartition("@")[2] or None)
    mail["Auto-Submitted"] = "auto-generated"
    mail.set_content(render_text(message, base_url))
    return mail


def _send_mail(target: Target, message: dict[str, Any], *, smtp: Smtp, allow_private: bool, timeout: float,
               base_url: str | None, done) -> Answer:
    if not smtp.host:
        return done(None, "no SMTP relay is configured (set AUDITOR_SMTP_HOST)")
    if not target.recipients:
        return done(None, "the channel has no recipients", retry=False)
    client = (_SMTPS if smtp.security == "tls" else _SMTP)(allow_private=allow_private, timeout=timeout)
    try:
        client.connect(smtp.host, smtp.port)
        if smtp.security == "starttls":
            client.starttls(context=ssl.create_default_context())
        if smtp.user:
            client.login(smtp.user, smtp.password)
        refused = client.send_message(_mail(target, message, smtp, base_url))
        client.quit()
    except RefusedDestination as exc:
        return done(None, str(exc), retry=False)
    except smtplib.SMTPRecipientsRefused as exc:
        return done(None, f"every recipient was refused: {sorted(exc.recipients)}", retry=False)
    except smtplib.SMTPResponseException as exc:
        # 5xx: the relay refuses this message for good; 4xx: try again later.
        text = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        return done(exc.smtp_code, f"SMTP {exc.smtp_code}: {text}", retry=not 500 <= exc.smtp_code < 600)
    except (OSError, smtplib.SMTPException) as exc:
        return done(None, f"{exc.__class__.__name__}: {exc}")
    finally:
        try:
            client.close()
        except OSError:
            pass
    note = f"refused recipients: {sorted(refused)}" if refused else None
    return done(250, note, sent=True)


def send(target: Target, body: str, *, smtp: Smtp, allow_private: bool, base_url: str | None = None,
         timeout: float = TIMEOUT) -> Answer:
    """Send one stored message to the channel; never raises."""
    t0 = time.perf_counter()

    def done(status: int | None, error: str | None, retry: bool = True, sent: bool = False) -> Answer:
        return Answer(status, None if error is None else error[:_KEPT], round((time.perf_counter() - t0) * 1000, 1),
                      retry, sent)

    message = json.loads(body)
    if target.kind == "email":
        return _send_mail(target, message, smtp=smtp, allow_private=allow_private, timeout=timeout,
                          base_url=base_url, done=done)
    payload = json.dumps({"text": _slack_text(message, base_url)}, ensure_ascii=False).encode("utf-8")
    return post(target.url or "", payload, {"Content-Type": "application/json", "User-Agent": "Auditor-Alerts/1"},
                allow_private=allow_private, timeout=timeout)
