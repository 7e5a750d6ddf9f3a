"""``auditor connect label-studio``: a Label Studio project feeding a dataset, live."""

from __future__ import annotations

import click

from auditor.cli._connect import allow_private_option, connect_group, outgoing_destination
from auditor.cli._workspace import resolve_workspace, workspace_option

_ACTIONS = ["ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED", "TASKS_DELETED"]


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, target = value.partition("=")
        if not sep or not key.strip() or not target.strip():
            raise click.BadParameter(f"{value!r}: expected KEY=VALUE", param_hint=option)
        out[key.strip()] = target.strip()
    return out


@connect_group().command("label-studio")
@click.option("--url", "ls_url", required=True, help="Label Studio's address, e.g. https://label.example.com.")
@click.option("--project", "project_id", type=click.IntRange(1, 2**31 - 1), required=True,
              help="The Label Studio project id.")
@click.option("--dataset", required=True, help="The Auditor dataset its annotations go to (it must exist).")
@click.option("--token", default=None,
              help="Label Studio API token of the pull sync, stored encrypted with a key derived from "
                   "AUDITOR_SECRET_KEY. Without it the token is read from --token-env.")
@click.option("--token-env", default=None,
              help="Keep the token out of the database: the variable every syncing process reads it from "
                   "(default LABEL_STUDIO_API_KEY).")
@click.option("--item-field", default=None,
              help="Task data field holding Auditor's item id (default item_id; tasks without it use the task id).")
@click.option("--from-name", default=None, help="The Choices control to read (default: the project's only one).")
@click.option("--label", "labels", multiple=True, metavar="CHOICE=LABEL",
              help="Map a Label Studio choice to a dataset label (repeatable; default: same names).")
@click.option("--vendor-domain", multiple=True, metavar="DOMAIN=VENDOR",
              help="Annotators whose email is at DOMAIN (or a subdomain) belong to VENDOR. Repeatable.")
@click.option("--vendor-user", multiple=True, metavar="USER=VENDOR",
              help="The Label Studio user (id or email) belongs to VENDOR. Repeatable; wins over domains.")
@click.option("--vendor-default", default=None, help="Vendor of annotators no other rule names.")
@click.option("--annotator-namespace", default=None,
              help="Annotators are named NAMESPACE/<Label Studio user id> (default: the URL's host[:port]; "
                   "'' for the bare user id, as file imports of Label Studio exports name them).")
@click.option("--rotate-secret", is_flag=True, help="Make a new webhook secret (the old one stops working).")
@click.option("--register-webhook", metavar="BASE_URL", default=None,
              help="Also create the webhook in Label Studio, posting to BASE_URL/hooks/label-studio/<id> "
                   "(needs a new secret: on creation or with --rotate-secret).")
@allow_private_option
@click.option("--no-sync", is_flag=True,
              help="Store the connector only: no check of the project's labels and no backfill now.")
@workspace_option()
@click.option("--database-url", envvar="AUDITOR_DATABASE_URL",
              help="Database URL (default: AUDITOR_DATABASE_URL or the SQLite file in the instance folder).")
def connect_label_studio(ls_url: str, project_id: int, dataset: str, token: str | None, token_env: str | None,
                         item_field: str | None, from_name: str | None, labels: tuple[str, ...],
                         vendor_domain: tuple[str, ...], vendor_user: tuple[str, ...], vendor_default: str | None,
                         annotator_namespace: str | None, rotate_secret: bool, register_webhook: str | None,
                         allow_private: bool, no_sync: bool, workspace: str | None,
                         database_url: str | None) -> None:
    """Connect a Label Studio project to a dataset: webhooks in, and a pull sync now and on schedule.

    Creates the connector (or updates its settings), checks that every choice of the
    project's Choices control is a dataset label (or is mapped to one with --label), and
    pulls the project: every annotation becomes a label of its task's item by its
    annotator, ground-truth annotations set gold labels (several on one item: the one
    updated last wins, the others are ignored and counted), updates are re-labels and
    deletions are recorded. An annotation that cannot be read is quarantined (listed with
    its task, the reason and the fix, here and on the dataset's feeds) and the rest syncs.
    Running it again catches up. The worker's beat task does the same every
    AUDITOR_LABELSTUDIO_SYNC_SECONDS; webhooks bring each change at once.
    """
    from auditor.cli.ingest import _session
    from auditor.connectors.labelstudio import credentials, store
    from auditor.connectors.labelstudio.mapping import VendorMap, choice_labels
    from auditor.db import Dataset
    from auditor.ingest import IngestError

    if token is not None and token_env is not None:
        raise click.UsageError("give --token or --token-env, not both")
    label_map = _pairs(labels, "--label") if labels else None
    vendors = None
    if vendor_domain or vendor_user or vendor_default is not None:
        vendors = VendorMap.from_json({"domains": _pairs(vendor_domain, "--vendor-domain"),
                                       "users": _pairs(vendor_user, "--vendor-user"), "default": vendor_default})
    try:
        url = store.normalize_url(ls_url)
    except IngestError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    outgoing_destination(url, allow_private, "--url")

    with _session(database_url) as session:
        workspace = resolve_workspace(session, workspace)
        stored_token = None
        if not no_sync and token is None and token_env is None:
            stored_token = _stored_token(session, workspace, dataset, url, project_id)
    client = project = None
    if not no_sync:
        client, project = _open_project(url, project_id, token or stored_token, token_env)
    with _session(database_url) as session:
        try:
            from auditor.ingest import get_dataset

            ds = get_dataset(session, dataset, workspace=workspace)
            conn, secret = store.configure(
                session, workspace=workspace, dataset=dataset, url=url, project_id=project_id, token=token,
                token_env=token_env, item_field=item_field, from_name=from_name, label_map=label_map,
                vendor_map=vendors, namespace=annotator_namespace, rotate_secret=rotate_secret)
            if client is not None:  # with the settings as stored (a failure stores nothing)
                _check_choices(project, conn.from_name, conn.label_map, list(ds.labels), choice_labels)
        except (IngestError, credentials.TokenError) as exc:
            raise click.ClickException(str(exc)) from None
        connector_id, dataset_id = conn.id, conn.dataset_id
        dataset_name = session.get(Dataset, dataset_id).name
    click.echo(f"connector {connector_id}: Label Studio {url} project {project_id} -> dataset {dataset_name!r} "
               f"(workspace {workspace!r})")
    click.echo(f"webhook URL: <auditor>/hooks/label-studio/{connector_id}")
    if secret is not None:
        click.echo(f"webhook header (shown once; the webhook in Label Studio sends it): "
                   f"{credentials.SECRET_HEADER}: {secret}")
    if register_webhook:
        _register_webhook(client, register_webhook, secret, connector_id, project_id)
    if no_sync:
        click.echo("not checked against Label Studio and not synced (--no-sync)")
        return
    _sync_now(database_url, connector_id, client)


def _stored_token(session, workspace: str, dataset: str, url: str, project_id: int) -> str | None:
    """The token an existing connector keeps (decrypted or from its variable), if any."""
    from sqlalchemy import select

    from auditor.connectors.labelstudio import credentials, store
    from auditor.db import Dataset, LabelStudioConnector, Workspace

    conn = session.scalar(select(LabelStudioConnector).join(Dataset, Dataset.id == LabelStudioConnector.dataset_id)
                          .join(Workspace, Workspace.id == Dataset.workspace_id)
                          .where(Workspace.slug == workspace, Dataset.name == dataset, LabelStudioConnector.url == url,
                                 LabelStudioConnector.project_id == project_id))
    if conn is None:
        return None
    try:
        return store.resolve_token(conn)
    except credentials.TokenError as exc:
        raise click.ClickException(str(exc)) from None


def _check_choices(project, from_name, label_map, dataset_labels, choice_labels) -> None:
    from auditor.ingest import IngestError

    try:
        control, choices = choice_labels(getattr(project, "parsed_label_config", None), from_name)
    except ValueError as exc:
        raise IngestError(str(exc)) from None
    mapped = {c: (label_map or {}).get(c, c) for c in choices}
    missing = [f"{c!r}" + (f" (mapped to {mapped[c]!r})" if mapped[c] != c else "")
               for c in choices if mapped[c] not in dataset_labels]
    if missing:
        raise IngestError(f"the choices {', '.join(missing)} of control {control!r} are not labels of the dataset "
                          f"({dataset_labels}): map them with --label CHOICE=LABEL")


def _open_project(url: str, project_id: int, token: str | None, token_env: str | None):
    """A Label Studio client and the project, with the token given or stored, else read from
    ``token_env`` (or LABEL_STUDIO_API_KEY); a clear error when none is found or the project
    cannot be read."""
    import os

    from auditor.connectors.errors import ConnectorError
    from auditor.connectors.labelstudio.sync import make_client

    the_token = token or (os.environ.get(token_env) if token_env else None) or \
        (os.environ.get("LABEL_STUDIO_API_KEY") if token_env is None else None)
    if not the_token:
        raise click.UsageError(f"no Label Studio token: pass --token, or set {token_env or 'LABEL_STUDIO_API_KEY'}"
                               " (or --no-sync to store the connector unchecked)")
    try:
        client = make_client(url, the_token)
        return client, client.projects.get(id=project_id)
    except ConnectorError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(f"cannot read project {project_id} at {url}: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}") from None


def _register_webhook(client, base_url: str, secret: str | None, connector_id: int, project_id: int) -> None:
    """Create the connector's webhook in Label Studio (it needs the secret just made)."""
    from auditor.connectors.labelstudio import credentials

    if secret is None:
        raise click.ClickException("--register-webhook needs the secret, shown only when it is made: "
                                   "add --rotate-secret")
    if client is None:
        raise click.ClickException("--register-webhook talks to Label Studio: drop --no-sync")
    hook_url = f"{base_url.rstrip('/')}/hooks/label-studio/{connector_id}"
    try:
        client.webhooks.create(url=hook_url, project=project_id, headers={credentials.SECRET_HEADER: secret},
                               send_payload=True, send_for_all_actions=False, actions=_ACTIONS)
    except Exception as exc:
        raise click.ClickException(f"could not create the webhook in Label Studio: {type(exc).__name__}: "
                                   f"{str(exc)[:300]}") from None
    click.echo(f"webhook created in Label Studio: {hook_url}")


def _sync_now(database_url: str | None, connector_id: int, client) -> None:
    """The first pull sync, its quarantined annotations listed, and an audit requested if it changed data."""
    from auditor.cli.ingest import _request_audit
    from auditor.connectors.errors import ConnectorError
    from auditor.connectors.labelstudio.sync import sync_connector
    from auditor.db import make_engine, make_session_factory

    engine = make_engine(database_url)
    try:
        try:
            result = sync_connector(make_session_factory(engine), connector_id, client=client)
        except ConnectorError as exc:
            raise click.ClickException(f"sync failed: {exc}") from None
    finally:
        engine.dispose()
    click.echo(f"synced: {result.message}")
    for q in result.quarantine[:20]:
        click.echo(f"quarantined: task {q.task_id} annotation {q.ls_id}: {q.reason} (fix: {q.hint})", err=True)
    if len(result.quarantine) > 20:
        click.echo(f"... and {len(result.quarantine) - 20} more quarantined (listed on the dataset's feeds)", err=True)
    if result.changed:
        _request_audit(result.dataset_id, database_url)
