"""``auditor serve``, ``auditor users create``, ``auditor tokens create``: the web app and its accounts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from auditor.cli import main
from auditor.cli._workspace import WORKSPACE_HELP, resolve_workspace, workspace_option

_ROLES = ["admin", "analyst", "vendor", "viewer"]
#: The web app's factory and its gunicorn hooks, named as in the container's command.
WEB_APP = "auditor.web:create_app()"
WEB_HOOKS = "auditor.web.gunicorn_conf"


def _session_scope():
    from auditor.db import make_engine, make_session_factory, session_scope

    return session_scope(make_session_factory(make_engine()))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Gunicorn worker processes.")
@click.option("--threads", default=4, show_default=True, type=click.IntRange(1, 64), help="Threads per worker.")
@click.option("--dev", is_flag=True, help="Flask's reloading development server instead of gunicorn.")
def serve(host: str, port: int, workers: int, threads: int, dev: bool) -> None:
    """Run the web app (JSON API and dashboards) with gunicorn."""
    import os
    import secrets
    import sys

    # Every worker process must sign sessions and CSRF tokens with the same key: without a
    # configured one, pick one here, before the workers fork, for this server's lifetime.
    os.environ.setdefault("AUDITOR_SECRET_KEY", secrets.token_hex(32))
    # The app and its server hooks by name, as the container runs them: the command line
    # starts the web app without importing it (the app logs each request with its id; the
    # hooks share the Prometheus counts of the workers).
    if dev:
        from flask.cli import ScriptInfo

        ScriptInfo(app_import_path=WEB_APP).load_app().run(host=host, port=port, debug=False, use_reloader=True)
        return
    from gunicorn.app.wsgiapp import WSGIApplication

    sys.argv = ["auditor serve", "-c", f"python:{WEB_HOOKS}", "--bind", f"{host}:{port}", "--workers", str(workers),
                "--threads", str(threads), "--worker-class", "gthread", WEB_APP]
    WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]", prog="auditor serve").run()


@main.group()
def users() -> None:
    """User accounts of the web UI and API."""


@users.command("create")
@workspace_option(WORKSPACE_HELP + " Created if new.")
@click.option("--email", required=True, help="Login name.")
@click.option("--role", type=click.Choice(_ROLES), default="viewer", show_default=True)
@click.option("--vendor", help="For the vendor role: the vendor this user speaks for.")
@click.option("--name", "display_name", help="Display name.")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True,
              help="Password for the UI (prompted when omitted).")
def users_create(workspace: str | None, email: str, role: str, vendor: str | None, display_name: str | None,
                 password: str) -> None:
    """Create a user (or reset its role, vendor and password)."""
    from auditor.actions.accounts import AccountError, save_user
    from auditor.db import Role
    from auditor.ingest import get_workspace

    with _session_scope() as db:
        workspace = resolve_workspace(db, workspace)
        ws = get_workspace(db, workspace, create=True)
        try:
            user, created = save_user(db, ws.id, email, role=Role(role), password=password, vendor=vendor,
                                      display_name=display_name)
        except AccountError as exc:
            if exc.field == "vendor":
                raise click.UsageError("--vendor is required for the vendor role.") from None
            raise click.BadParameter(str(exc), param_hint=f"--{exc.field}") from None
        click.echo(f"user {user.email} ({role}) {'created' if created else 'updated'} in workspace {workspace}")


@main.group()
def tokens() -> None:
    """API tokens (stored hashed; shown once)."""


@tokens.command("create")
@workspace_option()
@click.option("--user", "email", required=True, help="Email of the user the token acts for.")
@click.option("--role", type=click.Choice(_ROLES), help="Narrow the token to this role (default: the user's).")
@click.option("--dataset", "datasets", multiple=True,
              help="Grant the user this dataset (vendors submit only to granted datasets); repeatable.")
@click.option("--name", default="cli", show_default=True, help="A label for the token.")
@click.option("--expires-days", type=click.IntRange(1, 3650), help="Expire after this many days.")
def tokens_create(workspace: str | None, email: str, role: str | None, datasets: tuple[str, ...], name: str,
                  expires_days: int | None) -> None:
    """Create an API token and print it (the only time it is shown)."""
    from sqlalchemy import select

    from auditor.actions.accounts import issue_token
    from auditor.db import DatasetGrant, Role, User, Workspace
    from auditor.ingest import IngestError, get_dataset

    with _session_scope() as db:
        workspace = resolve_workspace(db, workspace)
        user = db.scalar(select(User).join(Workspace).where(Workspace.slug == workspace,
                                                            User.email == email.strip().lower()))
        if user is None:
            raise click.UsageError(f"no user {email!r} in workspace {workspace!r}; create it with "
                                   "'auditor users create'.")
        if role == "vendor" and user.role != Role.VENDOR:
            raise click.UsageError(f"{email} is a {user.role.value}, not a vendor: create a vendor user.")
        for ds_name in datasets:
            try:
                ds = get_dataset(db, ds_name, workspace=workspace)
            except IngestError as exc:
                raise click.UsageError(str(exc)) from None
            if db.get(DatasetGrant, (ds.id, user.id)) is None:
                db.add(DatasetGrant(dataset_id=ds.id, user_id=user.id))
        expires = datetime.now(UTC) + timedelta(days=expires_days) if expires_days else None
        _, plaintext = issue_token(db, user, name=name, role=Role(role) if role else None, expires_at=expires)
        click.echo(plaintext)


def _actor() -> str:
    import os

    try:
        return f"cli:{os.getlogin()}"
    except OSError:
        return "cli"


def _user(db, workspace: str | None, email: str):
    from sqlalchemy import select

    from auditor.db import User, Workspace

    workspace = resolve_workspace(db, workspace)
    user = db.scalar(select(User).join(Workspace).where(Workspace.slug == workspace,
                                                        User.email == email.strip().lower()))
    if user is None:
        raise click.UsageError(f"no user {email!r} in workspace {workspace!r}.")
    return workspace, user


@tokens.command("list")
@workspace_option()
@click.option("--user", "email", required=True, help="Email of the user whose tokens to list.")
def tokens_list(workspace: str | None, email: str) -> None:
    """A user's tokens: id, name, prefix, created, expires, revoked (never the token itself)."""
    from sqlalchemy import select

    from auditor.db import ApiToken

    with _session_scope() as db:
        workspace, user = _user(db, workspace, email)
        click.echo(f"tokens of {user.email} in workspace {workspace!r}" + ("" if user.is_active else " (user inactive)"))
        for t in db.scalars(select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id)):
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            expiry = f"expires {t.expires_at:%Y-%m-%d}" if t.expires_at else "no expiry"
            click.echo(f"{t.id}\t{t.name}\t{t.prefix}\tcreated {t.created_at:%Y-%m-%d}\t{expiry}\t{state}")


@tokens.command("revoke")
@workspace_option()
@click.option("--user", "email", required=True, help="Email of the token's user.")
@click.option("--id", "token_ids", type=int, multiple=True, help="The token's id (see 'tokens list'); repeatable.")
@click.option("--prefix", "prefixes", multiple=True,
              help="The token's prefix as 'tokens list' shows it (or the whole token); repeatable.")
@click.option("--all", "revoke_all", is_flag=True, help="Every token of the user.")
def tokens_revoke(workspace: str | None, email: str, token_ids: tuple[int, ...], prefixes: tuple[str, ...],
                  revoke_all: bool) -> None:
    """Revoke tokens at once (the next request with one is refused); recorded with who and when."""
    from sqlalchemy import select

    from auditor.actions.accounts import revoke_token
    from auditor.db import ApiToken

    if not (token_ids or prefixes or revoke_all):
        raise click.UsageError("name the tokens: --id, --prefix or --all.")
    with _session_scope() as db:
        workspace, user = _user(db, workspace, email)
        tokens_ = list(db.scalars(select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id)))
        # A prefix names a token when it holds the whole stored prefix (as 'tokens list' shows it, or the token).
        chosen = [t for t in tokens_ if revoke_all or t.id in token_ids
                  or any(p.rstrip("…").startswith(t.prefix) for p in prefixes)]
        missing = [i for i in token_ids if i not in {t.id for t in tokens_}]
        if missing or (prefixes and not chosen):
            raise click.UsageError(f"{user.email} has no token {missing[0] if missing else prefixes[0]!r} "
                                   f"(see 'auditor tokens list').")
        actor = _actor()
        n = sum(revoke_token(db, t, actor=actor) for t in chosen)
        click.echo(f"{n} token(s) of {user.email} revoked in workspace {workspace!r}"
                   + (f" ({len(chosen) - n} already revoked)" if len(chosen) > n else ""))


def _set_active(workspace: str | None, email: str, active: bool) -> None:
    from auditor.actions.accounts import set_user_active

    with _session_scope() as db:
        workspace, user = _user(db, workspace, email)
        changed = set_user_active(db, user, active, actor=_actor())
        state = "reactivated" if active else "deactivated"
        click.echo(f"user {user.email} {state} in workspace {workspace!r}" if changed
                   else f"user {user.email} was already {'active' if active else 'inactive'} in workspace {workspace!r}")


@users.command("deactivate")
@workspace_option()
@click.option("--email", required=True, help="The user's login name.")
def users_deactivate(workspace: str | None, email: str) -> None:
    """Refuse the user's sessions and tokens from the next request on (recorded with who and when)."""
    _set_active(workspace, email, False)


@users.command("reactivate")
@workspace_option()
@click.option("--email", required=True, help="The user's login name.")
def users_reactivate(workspace: str | None, email: str) -> None:
    """Let a deactivated user log in again (its tokens work again unless revoked one by one)."""
    _set_active(workspace, email, True)
