"""A vendor's price per label: set or cleared from the vendors' pages, the JSON API
(``POST``/``DELETE /api/v1/vendor-prices``) or ``auditor vendors``. Setting or clearing a price
drops the workspace's stored plans (their costs are stale).
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from auditor.audit import plans
from auditor.db import Role, VendorPrice

__all__ = ["PRICE_SETTERS", "clear_vendor_price", "set_vendor_price"]

#: The roles that may set and clear prices.
PRICE_SETTERS = frozenset({Role.ADMIN, Role.ANALYST})


def set_vendor_price(db: Session, workspace_id: int, vendor: str, price_per_label: float,
                     currency: str | None = None) -> VendorPrice:
    """Set the vendor's price (``currency`` None keeps its old one, else the workspace's) and commit.

    Two first prices of one vendor set at the same moment both insert; the second one's
    unique-key violation is retried once, as an update of the row the first one wrote."""
    try:
        row = plans.set_price(db, workspace_id, vendor, price_per_label, currency)
        db.commit()
    except IntegrityError:
        db.rollback()
        row = plans.set_price(db, workspace_id, vendor, price_per_label, currency)
        db.commit()
    return row


def clear_vendor_price(db: Session, workspace_id: int, vendor: str) -> bool:
    """Remove the vendor's price and commit; False (nothing written) when it had none."""
    if not plans.clear_price(db, workspace_id, vendor):
        return False
    db.commit()
    return True
