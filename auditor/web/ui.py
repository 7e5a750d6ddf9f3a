"""Server-rendered dashboards and the login form."""

from __future__ import annotations

import hashlib
from functools import wraps
from urllib.parse import quote, urlsplit

from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from sqlalchemy import select

from auditor.db import Annotator, Dataset, Model, Role, User, Workspace
from auditor.web import dashboards, timerange
from auditor.web.cache import cached
from auditor.web.db import get_session, in_workspace
from auditor.web.security import dummy_password_hash, limiter, load_principal, verify_password

__all__ = ["bp"]

bp = Blueprint("ui", __name__)


def login_required(*, readers_only: bool = True):
    """Pages need a logged-in user; most also need a role that reads the whole workspace."""

    def decorate(fn):
        @wraps(fn)
        def wrapper(**kwargs):
            principal = load_principal(allow_session=True, with_fingerprint=request.method == "GET")
            if principal is None:
                return redirect(url_for("ui.login", next=here()))
            if readers_only and not principal.reads_all:
                if principal.role == Role.VENDOR and principal.vendor:
                    return redirect(url_for("ui.vendor", name=principal.vendor))
                abort(403)
            if principal.via == "session" and request.method == "GET":
                timerange.note_visit(get_session(), principal.user_id)
            return fn(**kwargs)

        return wrapper

    return decorate


def here() -> str:
    """This request's path and query, as the address bar had them (a link followed while logged
    out is where the login leads back to: a filtered link keeps its filter).

    The path is quoted again (Werkzeug decoded it), so that a name holding a space, a ``?``
    or ``%`` survives, and :func:`local_path` accepts it.
    """
    path = quote(request.path, safe="/!$&'()*+,;=:@~")
    query = request.query_string.decode("latin-1")
    return f"{path}?{query}" if query else path


def _login_limit() -> str:
    return current_app.config["AUDITOR_LOGIN_LIMIT"]


def _account_limit() -> str:
    return current_app.config.get("AUDITOR_LOGIN_ACCOUNT_LIMIT", "5 per minute; 30 per hour")


def _account_key() -> str:
    # Guessing one account's password from many addresses meets this limit (the address
    # limit above meets one address guessing many accounts).
    slug = request.form.get("workspace", "").strip()[:100]
    email = request.form.get("email", "").strip().lower()[:320]
    return "account:" + hashlib.sha256(f"{slug}\n{email}".encode()).hexdigest()[:32]


@bp.route("/login", methods=["GET", "POST"])
@limiter.limit(_login_limit, methods=["POST"])
@limiter.limit(_account_limit, methods=["POST"], key_func=_account_key)
def login():
    """Workspace, email and password; the CSRF token is checked before this runs."""
    error = None
    if request.method == "POST":
        db = get_session()
        slug = request.form.get("workspace", "").strip()
        email = request.form.get("email", "").strip().lower()
        password = request.form.get("password", "")
        row = db.execute(select(User, Workspace).join(Workspace, User.workspace_id == Workspace.id)
                         .where(Workspace.slug == slug, User.email == email)).first()
        # An unknown account costs the same password hash as a known one: the answer's time
        # does not tell which emails exist (120 ms against 5 ms).
        stored = row[0].password_hash if row is not None and row[0].password_hash else None
        matches = verify_password(stored or dummy_password_hash(), password) and stored is not None
        if row is not None and row[0].is_active and matches:
            user, ws = row
            session.clear()
            session["user_id"], session["workspace_id"] = user.id, ws.id
            session["generation"] = user.session_generation
            session.permanent = False
            return redirect(local_path(request.args.get("next", "")) or url_for("ui.overview"))
        error = "Unknown workspace, email or password."
    return render_template("login.html", error=error), (401 if error else 200)


def local_path(target: str) -> str | None:
    """``target`` if it is a path on this site, else None (no open redirect after login).

    Browsers drop tabs and line breaks from URLs and read a backslash as a slash, so a
    tab between two slashes means ``//evil.example``: any control character, white space or
    backslash refuses the target, and what is left must be one absolute path with no
    scheme or host.
    """
    if not target or any(ord(ch) < 0x21 or ch in "\\\x7f" for ch in target):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return None
    return target


@bp.post("/logout")
def logout():
    """End the session here and on the server: a copy of its cookie is refused afterwards."""
    principal = load_principal(allow_session=True)
    if principal is not None and principal.via == "session":
        from auditor.actions.accounts import end_sessions

        db = get_session()
        user = db.get(User, principal.user_id)
        if user is not None:
            end_sessions(user)
            db.commit()
    session.clear()
    flash("Logged out.")
    return redirect(url_for("ui.login"))


@bp.get("/")
@login_required()
@cached
def overview():
    data = dashboards.overview(get_session(), g.principal.workspace_id, period=timerange.page_range("7d"))
    return render_template("overview.html", **data)


# Ids are 32-bit integers in the database: a larger one in a URL names nothing (a 404, not a
# database error).
MAX_ID = 2**31 - 1


def dataset_or_404(dataset_id: int) -> Dataset:
    """The dataset of the caller's workspace with this id, or a 404."""
    ds = in_workspace(get_session(), Dataset, dataset_id, g.principal.workspace_id) if dataset_id <= MAX_ID else None
    if ds is None:
        abort(404)
    return ds


def dataset_arg() -> int | None:
    """The query's ``dataset_id`` (a page's choice of dataset), None when absent or not a number.

    A number must name a dataset the caller may see: another workspace's id is a 404, as in
    the API, rather than quietly showing another dataset.
    """
    value = request.args.get("dataset_id", type=int)
    if value is None:
        return None
    principal = g.principal
    if value < 0 or (not principal.reads_all and value not in principal.grants):
        abort(404)
    return dataset_or_404(value).id


@bp.get("/datasets/<int:dataset_id>")
@login_required()
@cached
def dataset(dataset_id: int):
    return render_template("dataset.html", **dashboards.dataset_page(get_session(), dataset_or_404(dataset_id)))


@bp.get("/models/<int:model_id>")
@login_required()
@cached
def model(model_id: int):
    m = in_workspace(get_session(), Model, model_id, g.principal.workspace_id) if model_id <= MAX_ID else None
    if m is None:
        abort(404)
    return render_template("model.html", **dashboards.model_page(get_session(), m, dataset_arg(),
                                                                 g.principal.workspace_id, request.args))


@bp.get("/vendors/<path:name>")
@login_required(readers_only=False)
@cached
def vendor(name: str):
    principal = g.principal
    if not principal.reads_all and (principal.role != Role.VENDOR or principal.vendor != name):
        abort(404)
    db = get_session()
    granted = None if principal.reads_all else principal.grants
    dataset_arg()  # another workspace's dataset is not found
    data = dashboards.vendor_page(db, principal.workspace_id, name, dataset_ids=granted, args=request.args,
                                  with_price=principal.reads_all, period=timerange.page_range("all"))
    from auditor.actions.prices import PRICE_SETTERS

    return render_template("vendor.html", can_price=principal.role in PRICE_SETTERS, **data)


@bp.get("/datasets/<int:dataset_id>/annotators/<path:external_id>")
@login_required(readers_only=False)
@cached
def annotator(dataset_id: int, external_id: str):
    """One annotator's weekly quality on a dataset. A vendor user sees its own annotators on the
    datasets it is granted only; anything else is simply not found, as on the vendor page."""
    principal = g.principal
    if not principal.reads_all and (principal.role != Role.VENDOR or not principal.vendor
                                    or dataset_id not in principal.grants):
        abort(404)
    db = get_session()
    ds = dataset_or_404(dataset_id)
    person = db.scalars(select(Annotator).where(Annotator.workspace_id == principal.workspace_id,
                                                Annotator.external_id == external_id)).first()
    if person is None or (not principal.reads_all and person.vendor != principal.vendor):
        abort(404)
    return render_template("annotator.html", **dashboards.annotator_page(db, ds, person,
                                                                         period=timerange.page_range("all")))


@bp.get("/audit-runs")
@login_required()
@cached
def audit_runs():
    return render_template("audit_runs.html", **dashboards.audit_runs(get_session(), g.principal.workspace_id,
                                                                      request.args, period=timerange.page_range("all")))


# --- access: admins revoke tokens and (de)activate users ---------------------------------------


def _admin() -> None:
    if g.principal.role != Role.ADMIN:
        abort(403)


@bp.get("/access")
@login_required()
def access():
    """Users, their tokens and the record of who revoked or (de)activated what (admins only; never cached)."""
    from auditor.db import AccessEvent, ApiToken

    _admin()
    db = get_session()
    w = g.principal.workspace_id
    users = list(db.scalars(select(User).where(User.workspace_id == w).order_by(User.email)))
    tokens: dict[int, list] = {}
    for t in db.scalars(select(ApiToken).join(User, ApiToken.user_id == User.id)
                        .where(User.workspace_id == w).order_by(ApiToken.id)):
        tokens.setdefault(t.user_id, []).append(t)
    events = list(db.scalars(select(AccessEvent).where(AccessEvent.workspace_id == w)
                             .order_by(AccessEvent.created_at.desc(), AccessEvent.id.desc()).limit(50)))
    return render_template("access.html", users=users, tokens=tokens, events=events)


@bp.post("/access/users/<int:user_id>/<any(deactivate, reactivate):action>")
@login_required()
def access_user(user_id: int, action: str):
    """The CSRF token is checked before this runs."""
    from auditor.actions.accounts import set_user_active

    _admin()
    db = get_session()
    user = in_workspace(db, User, user_id, g.principal.workspace_id)
    if user is None:
        abort(404)
    if action == "deactivate" and user.id == g.principal.user_id:
        flash("You cannot deactivate yourself; ask another admin.")
    else:
        set_user_active(db, user, action == "reactivate", actor=g.principal.email, actor_id=g.principal.user_id)
        db.commit()
        flash(f"{user.email} {action}d.")
    return redirect(url_for("ui.access"))


@bp.post("/access/tokens/<int:token_id>/revoke")
@login_required()
def access_token(token_id: int):
    """The CSRF token is checked before this runs."""
    from auditor.actions.accounts import revoke_token
    from auditor.db import ApiToken

    _admin()
    db = get_session()
    token = in_workspace(db, ApiToken, token_id, g.principal.workspace_id)
    if token is None:
        abort(404)
    revoke_token(db, token, actor=g.principal.email, actor_id=g.principal.user_id)
    db.commit()
    flash(f"Token {token.prefix} of {token.user.email} revoked.")
    return redirect(url_for("ui.access"))
