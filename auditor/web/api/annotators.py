"""Annotators and vendors."""

from __future__ import annotations

from sqlalchemy import Select, case, func, select

from auditor.db import (
    Annotator,
    Role,
    Tier,
)
from auditor.web.api import serializers as s
from auditor.web.api.common import ADMIN, READ_OR_VENDOR, B, commit, vendor_scope
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.errors import ApiError

__all__: list[str] = []  # the operations register themselves with the route table


# --- annotators and vendors -------------------------------------------------------------------


@endpoint("GET", "/annotators", summary="List annotators", tag="annotators", roles=READ_OR_VENDOR,
          listing=True, response=s.page_of("Annotator"),
          query=[Param("vendor", "string", "Only this vendor's annotators.", max_length=200),
                 Param("tier", "string", "Only this tier.", enum=("crowd", "expert")),
                 Param("external_id", "string", "Only the annotator with this external id.")])
def list_annotators(principal, db, vendor, tier, external_id):
    """Annotators of the workspace (a vendor sees its own)."""
    vendor = vendor_scope(principal, vendor)
    stmt = select(Annotator).where(Annotator.workspace_id == principal.workspace_id).order_by(Annotator.id)
    if vendor is not None:
        stmt = stmt.where(Annotator.vendor == vendor)
    if tier:
        stmt = stmt.where(Annotator.tier == Tier(tier))
    if external_id is not None:
        stmt = stmt.where(Annotator.external_id == external_id)
    return Listing(stmt, s.annotator, ["id", "external_id", "vendor", "tier", "created_at"], "annotators")


@endpoint("POST", "/annotators", summary="Create an annotator", tag="annotators", roles=ADMIN,
          body=B["AnnotatorCreate"], body_name="AnnotatorCreate", response=s.ref("Annotator"), status=201)
def create_annotator(principal, db, body):
    """An annotator with its vendor and tier."""
    a = Annotator(workspace_id=principal.workspace_id, external_id=body["external_id"],
                  vendor=body.get("vendor"), tier=Tier(body.get("tier", "crowd")))
    db.add(a)
    commit(db, f"An annotator {body['external_id']!r}")
    return s.annotator(a)


@endpoint("GET", "/annotators/<int:annotator_id>", summary="Read an annotator", tag="annotators",
          roles=READ_OR_VENDOR, response=s.ref("Annotator"))
def read_annotator(principal, db, annotator_id):
    """One annotator."""
    a = db.get(Annotator, annotator_id)
    if (a is None or a.workspace_id != principal.workspace_id
            or (principal.role == Role.VENDOR and a.vendor != principal.vendor)):
        raise ApiError(404, f"No annotator with id {annotator_id}.", field="annotator_id")
    return s.annotator(a)


def _vendors_stmt(principal) -> Select:
    return (select(Annotator.vendor, func.count(Annotator.id),
                   func.sum(case((Annotator.tier == Tier.EXPERT, 1), else_=0)))
            .where(Annotator.workspace_id == principal.workspace_id, Annotator.vendor.is_not(None))
            .group_by(Annotator.vendor).order_by(Annotator.vendor))


@endpoint("GET", "/vendors", summary="List vendors", tag="annotators", roles=READ_OR_VENDOR, listing=True,
          response=s.page_of("Vendor"))
def list_vendors(principal, db):
    """Vendors (the ``vendor`` of the workspace's annotators) with their annotator counts."""
    stmt = _vendors_stmt(principal)
    if principal.role == Role.VENDOR:
        stmt = stmt.where(Annotator.vendor == (principal.vendor or ""))
    return Listing(stmt, s.vendor, ["name", "n_annotators", "n_experts"], "vendors")


@endpoint("GET", "/vendors/<path:vendor>", summary="Read a vendor", tag="annotators", roles=READ_OR_VENDOR,
          response=s.ref("Vendor"))
def read_vendor(principal, db, vendor):
    """One vendor."""
    vendor_scope(principal, vendor)
    row = db.execute(_vendors_stmt(principal).where(Annotator.vendor == vendor)).first()
    if row is None:
        raise ApiError(404, f"No vendor named {vendor!r}.", field="vendor")
    return s.vendor(row)
