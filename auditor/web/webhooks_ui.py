"""The admins' page of outgoing webhooks: each webhook and its latest deliveries (read-only;
webhooks are created, tested and deleted through the API)."""

from __future__ import annotations

from flask import Blueprint, abort, g, render_template
from sqlalchemy import select

from auditor.db import Role, Webhook, WebhookDelivery
from auditor.web.db import get_session
from auditor.web.ui import login_required

__all__ = ["bp"]

bp = Blueprint("webhooks_ui", __name__)

DELIVERIES_SHOWN = 20


@bp.get("/webhooks")
@login_required()
def webhooks():
    """Admins only; never cached (the log changes with every attempt)."""
    if g.principal.role != Role.ADMIN:
        abort(403)
    db = get_session()
    hooks = list(db.scalars(select(Webhook).where(Webhook.workspace_id == g.principal.workspace_id)
                            .order_by(Webhook.id)))
    deliveries = {h.id: list(db.scalars(select(WebhookDelivery).where(WebhookDelivery.webhook_id == h.id)
                                        .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
                                        .limit(DELIVERIES_SHOWN)))
                  for h in hooks}
    return render_template("webhooks.html", hooks=hooks, deliveries=deliveries, shown=DELIVERIES_SHOWN)
