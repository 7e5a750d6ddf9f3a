"""The actions the pages, the JSON API and the command line share, on the real databases.

Front-end tests (tests/web, tests/cli) drive them through each door; these pin what the
actions themselves promise: passwords and tokens are stored as hashes and checked, revoking
and deactivating are recorded once, a vendor's first price set twice at the same moment ends
as one row (the second writer's unique-key violation is retried as an update), and a refused
alert step leaves nothing written.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from auditor.actions import accounts, alerts, prices
from auditor.audit import plans
from auditor.db import (
    AccessEvent,
    Alert,
    AlertEvent,
    AlertSeverity,
    ApiToken,
    Role,
    User,
    VendorPrice,
    Workspace,
    make_session_factory,
)
from auditor.ingest import create_dataset, get_workspace


def _workspace(session: Session) -> int:
    ws = get_workspace(session, f"act-{uuid.uuid4().hex[:10]}", create=True)
    session.flush()
    return ws.id


def test_passwords_and_tokens_are_stored_as_hashes_and_checked(db_engine):
    factory = make_session_factory(db_engine)
    with factory() as db:
        ws = _workspace(db)
        user, created = accounts.save_user(db, ws, " Lead@Example.org ", role=Role.ADMIN, password="a long secret")
        assert created and user.email == "lead@example.org"
        assert "a long secret" not in user.password_hash
        assert accounts.verify_password(user.password_hash, "a long secret")
        assert not accounts.verify_password(user.password_hash, "a long secreT")
        assert not accounts.verify_password(None, "a long secret")
        generation = user.session_generation or 0
        again, created = accounts.save_user(db, ws, "lead@example.org", role=Role.ANALYST, password="another secret")
        assert again.id == user.id and not created and again.role == Role.ANALYST
        assert again.session_generation == generation + 1  # a new password ends the old sessions
        token, plaintext = accounts.issue_token(db, user, name="ci")
        assert plaintext.startswith(accounts.TOKEN_PREFIX) and token.prefix == plaintext[:12]
        assert token.token_hash == accounts.hash_token(plaintext) != plaintext
        db.commit()


@pytest.mark.parametrize(("field", "kwargs"), [("vendor", {"role": Role.VENDOR, "password": "long enough"}),
                                               ("password", {"role": Role.VIEWER, "password": "short"})])
def test_an_account_refused_names_its_field_and_writes_nothing(db_engine, field, kwargs):
    factory = make_session_factory(db_engine)
    with factory() as db:
        ws = _workspace(db)
        with pytest.raises(accounts.AccountError) as err:
            accounts.save_user(db, ws, "someone@example.org", **kwargs)
        assert err.value.field == field
        assert db.scalar(select(func.count()).select_from(User).where(User.workspace_id == ws)) == 0
        db.rollback()


def test_revoking_and_deactivating_are_recorded_once(db_engine):
    factory = make_session_factory(db_engine)
    with factory() as db:
        ws = _workspace(db)
        user, _ = accounts.save_user(db, ws, "ops@example.org", role=Role.VIEWER, password="long enough")
        token, _ = accounts.issue_token(db, user, name="t")
        assert accounts.revoke_token(db, token, actor="test") is True
        assert accounts.revoke_token(db, token, actor="test") is False
        assert accounts.set_user_active(db, user, False, actor="test") is True
        assert accounts.set_user_active(db, user, False, actor="test") is False
        events = db.scalars(select(AccessEvent).where(AccessEvent.user_id == user.id)).all()
        assert len(events) == 2 and {e.token_id for e in events} == {token.id, None}
        assert db.get(ApiToken, token.id).revoked_at is not None
        db.commit()


def test_two_first_prices_at_once_end_as_one_row(pg_engine):
    """Writer A inserts the vendor's first price and holds its transaction; writer B, through the
    action, inserts the same vendor and waits on A's key; A commits, B's insert fails on the
    unique key, and the action retries it as an update of A's row: one row, B's price."""
    factory = make_session_factory(pg_engine)
    with factory() as setup:
        ws = _workspace(setup)
        setup.commit()
    a = factory()
    plans.set_price(a, ws, "acme", 0.10, "usd")
    a.flush()  # A's row is in the table, uncommitted
    result: dict = {}

    def writer_b() -> None:
        with factory() as b:
            try:
                result["row"] = (prices.set_vendor_price(b, ws, "acme", 0.25, "eur").price_per_label, None)
            except Exception as exc:  # pragma: no cover - reported by the assertion below
                result["row"] = (None, exc)

    thread = threading.Thread(target=writer_b)
    thread.start()
    deadline = time.monotonic() + 30
    with pg_engine.connect() as watch:  # wait until B waits on A's key
        while time.monotonic() < deadline:
            waiting = watch.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()").scalar_one()
            if waiting:
                break
            time.sleep(0.05)
    a.commit()
    a.close()
    thread.join(30)
    assert result["row"] == (0.25, None)
    with factory() as db:
        rows = db.scalars(select(VendorPrice).where(VendorPrice.workspace_id == ws)).all()
        assert [(r.vendor, r.price_per_label, r.currency) for r in rows] == [("acme", 0.25, "EUR")]
        assert prices.clear_vendor_price(db, ws, "acme") is True
        assert prices.clear_vendor_price(db, ws, "acme") is False


def test_a_refused_alert_step_writes_nothing(db_engine):
    factory = make_session_factory(db_engine)
    with factory() as db:
        ws = _workspace(db)
        ds = create_dataset(db, f"d-{uuid.uuid4().hex[:8]}", ["a", "b"], workspace=db.get(Workspace, ws).slug)
        user, _ = accounts.save_user(db, ws, "analyst@example.org", role=Role.ANALYST, password="long enough")
        alert = Alert(workspace_id=ws, dataset_id=ds.id, kind="vendor_drop", severity=AlertSeverity.WARNING,
                      message="test")
        db.add(alert)
        db.commit()
        actor = alerts.Actor(user.id, user.email)
        assert alerts.acknowledge(db, alert, actor) is True
        assert alerts.acknowledge(db, alert, actor) is False
        events = db.scalar(select(func.count()).select_from(AlertEvent).where(AlertEvent.alert_id == alert.id))
        with pytest.raises(alerts.LifecycleError) as err:
            alerts.snooze(db, alert, datetime.now(UTC) + timedelta(days=800), actor)
        assert err.value.field == "until"
        db.refresh(alert)
        assert alert.snoozed_until is None and alert.acknowledged_by_id == user.id
        assert db.scalar(select(func.count()).select_from(AlertEvent).where(AlertEvent.alert_id == alert.id)) == events
        assert alerts.comment(db, alert, "looked at it", actor) is True
