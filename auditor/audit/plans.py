"""Audit plans of releases: their inputs from an audit snapshot, and their stored rows.

A plan (:func:`auditor.stats.plan_certification`) answers "what to label next, and how
much, to settle this release's verdict". It is computed by a worker (or the CLI) from the
dataset's snapshot and the release's anytime state as the last audit stored it, with the
verdict's settings of the audits and the workspace's vendor prices, and kept in one
``release_plan`` row per release × dataset, replaced by the next plan. Pages and the API
read that row; when it is missing or older than the latest audit they ask a worker for a
new one (:func:`request`), never compute in a request.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from auditor.audit.inputs import AuditSnapshot, ReleaseSnapshot
from auditor.audit.pipeline import AuditOptions
from auditor.db.models import (
    AuditRun,
    AuditStatus,
    Certification,
    Dataset,
    Release,
    ReleasePlan,
    VendorPrice,
)
from auditor.jsonable import finite
from auditor.stats import (
    AnytimeState,
    StatsInputError,
    plan_certification,
    relabel_priority,
    tally_counts,
)

__all__ = [
    "RELABEL_TOP",
    "PlanInputs",
    "clear_price",
    "compute",
    "forget_plans",
    "latest_audit",
    "plan_inputs",
    "price_rows",
    "request",
    "run",
    "set_price",
    "uncertified_releases",
    "vendor_cost",
    "vendor_prices",
]

#: Items of the relabel list kept with a plan (the top of it).
RELABEL_TOP = 5000
#: A plan asked for longer ago than this without an answer is asked for again.
PENDING_TIMEOUT = timedelta(minutes=15)
PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"


@dataclass(frozen=True)
class PlanInputs:
    """What a release's plan reads: its labelled, predicted items and the verdict's state."""

    counts: np.ndarray
    predictions: np.ndarray
    item_ids: np.ndarray
    state: AnytimeState | None
    vendor_counts: dict[str, np.ndarray] | None
    prices: dict[str, float]


def vendor_prices(session: Session, workspace_id: int) -> dict[str, float]:
    """The workspace's price per label of each vendor that has one."""
    return {v: float(p) for v, p in session.execute(
        select(VendorPrice.vendor, VendorPrice.price_per_label).where(VendorPrice.workspace_id == workspace_id))}


def price_rows(session: Session, workspace_id: int, vendors=None) -> dict[str, VendorPrice]:
    """The workspace's price rows by vendor (only those of ``vendors`` when given), one statement."""
    stmt = select(VendorPrice).where(VendorPrice.workspace_id == workspace_id)
    if vendors is not None:
        stmt = stmt.where(VendorPrice.vendor.in_(list(vendors) or [""]))
    return {p.vendor: p for p in session.scalars(stmt)}


def set_price(session: Session, workspace_id: int, vendor: str, price_per_label: float,
              currency: str | None = None) -> VendorPrice:
    """Set a vendor's price per label (``currency`` None keeps its old one, else the workspace's
    currency, USD unless set), and drop the workspace's stored plans, whose costs are stale now
    (the caller commits)."""
    row = session.scalars(select(VendorPrice).where(VendorPrice.workspace_id == workspace_id,
                                                    VendorPrice.vendor == vendor)).first()
    if row is None:
        row = VendorPrice(workspace_id=workspace_id, vendor=vendor)
        session.add(row)
    row.price_per_label = float(price_per_label)
    if not (currency or row.currency):
        from auditor.db import Workspace

        currency = session.scalar(select(Workspace.currency).where(Workspace.id == workspace_id))
    row.currency = (currency or row.currency or "USD").upper()
    forget_plans(session, workspace_id)
    return row


def clear_price(session: Session, workspace_id: int, vendor: str) -> bool:
    """Remove a vendor's price (and the stored plans that costed it); False when it had none.
    The caller commits."""
    row = session.scalars(select(VendorPrice).where(VendorPrice.workspace_id == workspace_id,
                                                    VendorPrice.vendor == vendor)).first()
    if row is None:
        return False
    session.delete(row)
    forget_plans(session, workspace_id)
    return True


def vendor_cost(n_items: int | None, n_annotations: int | None, expert_equivalence: float | None,
                price_per_label: float | None) -> dict[str, float | None]:
    """A vendor's expert equivalence per unit cost, from its report in an audit and its price.

    ``labels_per_item`` = its labels ÷ the items it labelled; ``cost_per_item`` = that ×
    the price per label; ``experts_per_unit_cost`` = the expert equivalence of its raters on
    an item ÷ the cost per item: how many expert raters one unit of money spent on its
    labels is worth. None where an input is missing (no price, no expert labels to compare
    with) or the vendor is free.
    """
    per_item = (n_annotations / n_items) if n_items and n_annotations is not None else None
    cost = None if price_per_label is None or per_item is None else per_item * price_per_label
    eq = finite(expert_equivalence)
    return {"labels_per_item": finite(per_item), "cost_per_item": finite(cost),
            "experts_per_unit_cost": finite(eq / cost) if eq is not None and cost else None}


def plan_inputs(snap: AuditSnapshot, release: ReleaseSnapshot, prices: Mapping[str, float]) -> PlanInputs:
    """The release's items with a label and a prediction (in item order), its stored anytime
    state, and each priced vendor's counts on those items."""
    ok = release.labels >= 0
    idx = release.item_index[ok]
    counts = snap.counts[idx]
    labelled = counts.sum(axis=1) > 0
    idx, counts, preds = idx[labelled], counts[labelled], release.labels[ok][labelled]
    stored = (snap.previous.certifications.get(release.release_id) or {}).get("anytime")
    state = AnytimeState.from_dict(stored) if stored else None
    vendor_counts = None
    priced = {v: p for v, p in prices.items() if v in set(snap.annotator_vendors)}
    if priced:
        n_labels = len(snap.labels)
        vendor_counts = {}
        for vendor in sorted(priced):
            members = [a for a, v in enumerate(snap.annotator_vendors) if v == vendor]
            keep = np.isin(snap.ann_annotator, members)
            vc = tally_counts(snap.ann_item[keep], snap.ann_label[keep], snap.counts.shape[0], n_labels)[idx]
            if vc.sum() > 0:
                vendor_counts[vendor] = vc
        if not vendor_counts:
            vendor_counts = None
    return PlanInputs(counts=counts, predictions=preds, item_ids=snap.item_ids[idx], state=state,
                      vendor_counts=vendor_counts,
                      prices={v: priced[v] for v in (vendor_counts or {})})


def forget_plans(session: Session, workspace_id: int) -> None:
    """Drop the workspace's stored plans (after a price changed: their costs are stale); the
    next read asks for new ones."""
    session.execute(delete(ReleasePlan).where(ReleasePlan.dataset_id.in_(
        select(Dataset.id).where(Dataset.workspace_id == workspace_id))))


def compute(inputs: PlanInputs, options: AuditOptions, *, probability: float = 0.8, seed: int = 0,
            n_simulations: int = 400) -> tuple[dict[str, Any], list[list[Any]]]:
    """The plan (JSON-ready) and the top of the relabel list (``[[item_id, gain], ...]``)."""
    if inputs.counts.shape[0] == 0:
        raise StatsInputError("none of the release's items has both a human label and a prediction")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = plan_certification(
            inputs.counts, inputs.predictions, target=options.threshold, tau=options.tau, method=options.method,
            bound=options.bound, probability=probability,
            label_cost=inputs.prices if inputs.vendor_counts else None, vendor_counts=inputs.vendor_counts,
            state=inputs.state if options.method == "anytime" else None, n_simulations=n_simulations,
            rng=np.random.default_rng([seed, 18]))
        rank = relabel_priority(inputs.counts, inputs.predictions, bound=options.bound)
    out = plan.to_dict()
    if inputs.vendor_counts:
        out["notes"].append("the verdict compares the model with the annotators whose labels it rests on: new "
                            "items labelled by a weaker vendor lower that bar, so compare the vendors' quality "
                            "(and expert equivalence per unit cost) before taking the cheapest design")
    out["n_items"] = int(inputs.counts.shape[0])
    out["prices"] = dict(inputs.prices)
    top = rank.top(RELABEL_TOP)
    gains = rank.expected_gain[: top.shape[0]]
    relabel = [[int(inputs.item_ids[i]), float(g), int(k)]
               for i, g, k in zip(top.tolist(), gains.tolist(), rank.labels[: top.shape[0]].tolist(), strict=True)]
    out["n_relabel"] = len(rank)
    return out, relabel


def latest_audit(session: Session, dataset_id: int) -> AuditRun | None:
    """The dataset's latest succeeded audit run."""
    return session.scalars(select(AuditRun).where(AuditRun.dataset_id == dataset_id,
                                                  AuditRun.status == AuditStatus.SUCCEEDED)
                           .order_by(AuditRun.data_version.desc(), AuditRun.id.desc()).limit(1)).first()


def run(session: Session, snap: AuditSnapshot, release_id: int, options: AuditOptions, *,
        probability: float = 0.8) -> ReleasePlan:
    """Compute the release's plan from ``snap`` and store it (the caller commits)."""
    audit = latest_audit(session, snap.dataset_id)
    row = session.scalars(select(ReleasePlan).where(ReleasePlan.release_id == release_id,
                                                    ReleasePlan.dataset_id == snap.dataset_id)).first()
    if row is None:
        row = ReleasePlan(release_id=release_id, dataset_id=snap.dataset_id, status=PENDING)
        session.add(row)
    row.audit_run_id = None if audit is None else audit.id
    row.data_version = snap.data_version
    row.finished_at = datetime.now(UTC)
    release = next((r for r in snap.releases if r.release_id == release_id), None)
    try:
        if release is None:
            raise StatsInputError("the release has no predictions on this dataset")
        inputs = plan_inputs(snap, release, vendor_prices(session, snap.workspace_id))
        plan, relabel = compute(inputs, options, probability=probability, seed=options.seed)
    except StatsInputError as exc:
        row.status, row.plan, row.relabel, row.error = FAILED, None, None, str(exc)
        return row
    row.status, row.plan, row.relabel, row.error = SUCCEEDED, plan, relabel, None
    return row


def uncertified_releases(session: Session, run_id: int, limit: int) -> tuple[int | None, list[int]]:
    """The audited dataset and the releases its audit ``run_id`` did not certify (by the badge's
    verdict), the most recently released first, at most ``limit`` of them (one statement each)."""
    dataset_id = session.scalar(select(AuditRun.dataset_id).where(AuditRun.id == run_id))
    if dataset_id is None or limit <= 0:
        return dataset_id, []
    ids = session.scalars(select(Certification.release_id).join(Release, Release.id == Certification.release_id)
                          .where(Certification.audit_run_id == run_id, Certification.certified.is_(False))
                          .order_by(Release.released_at.desc().nulls_last(), Release.id.desc()).limit(limit))
    return dataset_id, list(ids)


def current(session: Session, release_id: int, dataset_id: int) -> tuple[ReleasePlan | None, AuditRun | None]:
    """The stored plan and the latest audit it should stem from."""
    # populate_existing: a worker may have written the row since this session loaded it
    row = session.scalars(select(ReleasePlan).where(ReleasePlan.release_id == release_id,
                                                    ReleasePlan.dataset_id == dataset_id)
                          .execution_options(populate_existing=True)).first()
    return row, latest_audit(session, dataset_id)


def is_current(row: ReleasePlan | None, audit: AuditRun | None) -> bool:
    return row is not None and audit is not None and row.audit_run_id == audit.id and row.status != PENDING


def request(session: Session, release_id: int, dataset_id: int) -> tuple[ReleasePlan | None, bool]:
    """Make sure a plan for the latest audit is stored or on its way.

    Returns the row (None when the dataset has no succeeded audit with this release) and
    whether a worker should be asked now: the row is marked ``pending`` (the caller
    commits, then enqueues), unless a request younger than ``PENDING_TIMEOUT`` is pending.
    """
    row, audit = current(session, release_id, dataset_id)
    if audit is None or session.scalar(select(Certification.id).where(
            Certification.audit_run_id == audit.id, Certification.release_id == release_id)) is None:
        return row, False
    if is_current(row, audit):
        return row, False
    now = datetime.now(UTC)
    if row is not None and row.status == PENDING and row.requested_at is not None:
        asked = row.requested_at if row.requested_at.tzinfo else row.requested_at.replace(tzinfo=UTC)
        if now - asked < PENDING_TIMEOUT:
            return row, False
    if row is None:
        row = ReleasePlan(release_id=release_id, dataset_id=dataset_id, status=PENDING, requested_at=now)
        session.add(row)
    else:
        row.status, row.requested_at = PENDING, now
    return row, True
