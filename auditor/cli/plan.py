"""``auditor plan``: what to label next, and how much, to settle a release; ``auditor vendors price``."""

from __future__ import annotations

import json

import click

from auditor.cli import main
from auditor.cli._workspace import resolve_workspace, workspace_option

_URL = click.option("--url", envvar="AUDITOR_DATABASE_URL",
                    help="Database URL (default: AUDITOR_DATABASE_URL or the SQLite file in the instance folder).")


def _factory(url: str | None):
    from sqlalchemy import inspect

    from auditor.config import load_settings
    from auditor.db import make_engine, make_session_factory

    engine = make_engine(url or load_settings().database_url)
    if not inspect(engine).has_table("release_plan"):
        raise click.ClickException("the database is not migrated to this version: run `auditor db upgrade` first")
    return make_session_factory(engine)


def _lookup(session, workspace: str, dataset: str, model: str, release: str):
    from sqlalchemy import select

    from auditor.db import Dataset, Model, Release, Workspace

    ws = session.scalar(select(Workspace).where(Workspace.slug == workspace))
    if ws is None:
        raise click.ClickException(f"no workspace {workspace!r}")
    ds = session.scalar(select(Dataset).where(Dataset.workspace_id == ws.id, Dataset.name == dataset))
    if ds is None:
        raise click.ClickException(f"no dataset {dataset!r} in workspace {workspace!r}")
    rel = session.scalar(select(Release).join(Model, Release.model_id == Model.id)
                         .where(Model.workspace_id == ws.id, Model.name == model, Release.version == release))
    if rel is None:
        raise click.ClickException(f"no release {release!r} of model {model!r} in workspace {workspace!r}")
    return ds, rel


def _design(d: dict) -> str:
    what = (f"{d['new_items']:,} new items × {d['labels_per_item']} labels" if d["new_items"] else
            f"1 more label on the top {d['extra_labels_on_existing']:,} items to relabel")
    vendor = f" from {d['vendor']}" if d.get("vendor") else ""
    cost = f", cost {d['cost']:,.2f}" if d.get("cost") is not None else ""
    rng = ""
    if d.get("probability_low") is not None and d.get("probability_high") is not None:
        rng = f" (range {d['probability_low']:.2f}–{d['probability_high']:.2f})"
    return (f"{what}{vendor}: {d['labels']:,} labels{cost}; P(certified) {d['probability']:.3f} ± "
            f"{d['std_error']:.3f}{rng}")


def _print(plan: dict, relabel: list, names: dict, *, model: str, version: str, dataset: str) -> None:
    click.echo(f"release {model} {version} on dataset {dataset}: {plan['method']} verdict with "
               f"{'U_t' if plan['bound'] == 'theoretical' else 'U_e'} at S ≥ {plan['target']}; "
               f"{plan['n_simulations']} simulated futures per design, {plan['n_items']:,} items")
    score = plan["score_now"]
    click.echo(f"  now: {'certified' if plan['certified_now'] else 'not certified'}"
               f"{'' if score is None else f' (S = {score:.4f})'}")
    margins = ", ".join(f"{k}: {v:+.4f}" for k, v in plan["margins"].items() if v is not None)
    click.echo(f"  population margin L − U by labels per new item: {margins}")
    if not plan["certifiable"]:
        click.echo(f"  cannot be certified at any budget (posterior probability that some budget could: "
                   f"{plan['certifiable_probability']:.3f})")
    rec = plan["recommended"]
    if rec is not None:
        click.echo(f"  to certify with {plan['probability']:.0%} probability: {_design(rec)}")
    elif plan["certifiable"]:
        click.echo(f"  no design within the grid and budget reaches {plan['probability']:.0%} probability")
    assured = plan.get("assured")
    if assured is not None and assured != rec:
        click.echo(f"  {plan['probability']:.0%} even at the low end of the {plan.get('confidence', 0.8):.0%} range: "
                   f"{_design(assured)}")
    if plan.get("confidence") is not None:
        click.echo(f"  (range: the probability if the true margin is at either end of its "
                   f"{plan['confidence']:.0%} confidence interval; it holds for one fixed truth, the point value "
                   "averages over the margins the data cannot tell apart)")
    seen = set()
    for d in plan["designs"][1:]:
        key = (d.get("vendor"), d["labels_per_item"], d["extra_labels_on_existing"] > 0)
        if d["probability"] >= plan["probability"] and key not in seen:
            seen.add(key)
            click.echo(f"    {_design(d)}")
    if relabel:
        top = ", ".join(names.get(r[0], str(r[0])) for r in relabel[:10])
        click.echo(f"  relabel first (top 10 of {plan['n_relabel']:,}): {top}")
    for note in plan["notes"]:
        click.echo(f"  note: {note}")


@main.command("plan")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option("--model", required=True, help="Model name.")
@click.option("--release", required=True, help="Release version.")
@click.option("--probability", type=click.FloatRange(0.01, 0.99), default=0.8, show_default=True,
              help="Probability of certifying the recommended design must reach.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (with the relabel list's top).")
@workspace_option()
@_URL
def plan_command(dataset: str, model: str, release: str, probability: float, as_json: bool, workspace: str | None,
                 url: str | None) -> None:
    """Plan how to settle a release's verdict: the probability of certifying it with more items, more
    labels per item or more labels on existing items, their cost at the vendors' prices, and which
    items to relabel first. Computed here from the latest data (and stored for the release page)."""
    from sqlalchemy import select

    from auditor.audit import plans
    from auditor.audit.pipeline import AuditOptions
    from auditor.audit.snapshot import load_audit_snapshot
    from auditor.config import load_worker_settings
    from auditor.db import Item
    from auditor.db.session import session_scope

    factory = _factory(url)
    with session_scope(factory) as session:
        ws = resolve_workspace(session, workspace)
        ds, rel = _lookup(session, ws, dataset, model, release)
        ds_id, rel_id, version = ds.id, rel.id, rel.version
    with factory() as session:
        snap = load_audit_snapshot(session, ds_id)
        session.rollback()
    options = AuditOptions.from_settings(load_worker_settings())
    with session_scope(factory) as session:
        row = plans.run(session, snap, rel_id, options, probability=probability)
        status, plan, relabel, error = row.status, row.plan, row.relabel or [], row.error
        ids = [r[0] for r in relabel[:10]]
        names = dict(session.execute(select(Item.id, Item.external_id).where(Item.id.in_(ids))).all()) if ids else {}
    if status != plans.SUCCEEDED:
        raise click.ClickException(f"no plan: {error}")
    if as_json:
        top = [{"item_id": names.get(r[0], r[0]), "expected_gain": r[1], "labels": r[2]} for r in relabel[:100]]
        click.echo(json.dumps({"dataset": dataset, "model": model, "release": version, "plan": plan,
                               "relabel_top": top}, indent=1))
        return
    _print(plan, relabel, names, model=model, version=version, dataset=dataset)


@main.group("vendors")
def vendors_group() -> None:
    """Vendors (the names on annotators): their prices per label."""


@vendors_group.command("price")
@click.argument("vendor")
@click.argument("price", type=click.FloatRange(0.0, 1e9), required=False)
@click.option("--currency", default="USD", show_default=True, help="Currency code of the price.")
@click.option("--delete", is_flag=True, help="Remove the vendor's price.")
@workspace_option()
@_URL
def vendors_price(vendor: str, price: float | None, currency: str, delete: bool, workspace: str | None,
                  url: str | None) -> None:
    """Show, set (PRICE per label) or remove (--delete) a vendor's price."""
    from sqlalchemy import select

    from auditor.actions.prices import clear_vendor_price, set_vendor_price
    from auditor.db import VendorPrice, Workspace
    from auditor.db.session import session_scope

    if not vendor.strip() or len(vendor) > 200:
        raise click.BadParameter("must have 1 to 200 characters", param_hint="VENDOR")
    if not currency.isalpha() or len(currency) > 8:
        raise click.BadParameter("a currency code of letters, e.g. USD", param_hint="--currency")
    with session_scope(_factory(url)) as session:
        slug = resolve_workspace(session, workspace)
        ws = session.scalar(select(Workspace).where(Workspace.slug == slug))
        if ws is None:
            raise click.ClickException(f"no workspace {slug!r}")
        if delete:
            if not clear_vendor_price(session, ws.id, vendor):
                raise click.ClickException(f"no price is set for vendor {vendor!r} in workspace {slug!r}")
            click.echo(f"price of {vendor} removed in workspace {slug!r}")
            return
        if price is None:
            row = session.scalar(select(VendorPrice).where(VendorPrice.workspace_id == ws.id,
                                                           VendorPrice.vendor == vendor))
            if row is None:
                raise click.ClickException(f"no price is set for vendor {vendor!r} in workspace {slug!r}")
            click.echo(f"{vendor}: {row.price_per_label:g} {row.currency} per label (workspace {slug!r})")
            return
        set_vendor_price(session, ws.id, vendor, price, currency)
        click.echo(f"{vendor}: {price:g} {currency.upper()} per label in workspace {slug!r}")
