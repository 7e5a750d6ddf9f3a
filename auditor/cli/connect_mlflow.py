"""``auditor connect mlflow``: a registered model's versions as releases, verdicts back as tags."""

from __future__ import annotations

import click

from auditor.cli._connect import allow_private_option, connect_group, outgoing_destination
from auditor.cli._workspace import resolve_workspace, workspace_option
from auditor.cli.ingest import _URL, _field_map, _request_audit, _session, _who


@connect_group().command("mlflow")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", show_envvar=True, required=True,
              help="The MLflow tracking server (http(s)://host:port, or databricks). Credentials come from the "
                   "environment (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/_PASSWORD), never the URI.")
@click.option("--model", "registered_model", required=True, help="The registered model in MLflow's registry.")
@click.option("--dataset", required=True, help="The Auditor dataset its predictions are on.")
@click.option("--auditor-model", default=None,
              help="The Auditor model whose releases the versions become (default: the registered model's name).")
@click.option("--artifact-path", default="predictions.csv", show_default=True,
              help="The predictions file inside each version's artifacts: .csv, .tsv, .jsonl or .parquet with "
                   "item_id and label, or item_id and probabilities (a list, or one column per label).")
@click.option("--artifact-root", type=click.Choice(["run", "model"]), default="run", show_default=True,
              help="Where --artifact-path is: in the artifacts of the version's run, or in its model files.")
@click.option("--version", "versions", multiple=True, metavar="VERSION",
              help="Import only this version (repeatable; default: every version, newest 200).")
@click.option("--field", "fields", multiple=True, metavar="FIELD=COLUMN",
              help="Read FIELD (item_id, label, probabilities) from COLUMN of the artifact. Repeatable.")
@click.option("--tag-prefix", default="auditor.", show_default=True,
              help="Prefix of the model version tags written back (e.g. to connect one model to two datasets).")
@click.option("--write-back", is_flag=True,
              help="Also write the verdicts of the dataset's latest finished audit to the registry now (the "
                   "workers do so after every audit).")
@allow_private_option
@workspace_option()
@_URL
def connect_mlflow(tracking_uri: str, registered_model: str, dataset: str, auditor_model: str | None,
                   artifact_path: str, artifact_root: str, versions: tuple[str, ...], fields: tuple[str, ...],
                   tag_prefix: str, write_back: bool, allow_private: bool, workspace: str | None,
                   url: str | None) -> None:
    """Connect an MLflow registered model to a dataset and import its versions' predictions.

    Each version becomes the release <auditor-model> <version> (all or nothing per version;
    running the command again imports only versions not seen before; a rejected version is
    tagged auditor.rejected with the reason). The connection is stored: the workers' periodic
    sweep imports the versions registered later, and after every audit of the dataset the workers set the model version tags
    auditor.certified, auditor.S_anytime, auditor.L, auditor.U_t, auditor.survey_equivalence
    and auditor.audit_run_url (links start with AUDITOR_BASE_URL).
    """
    from auditor.config import load_settings, load_worker_settings
    from auditor.connectors import mlflow as connector
    from auditor.ingest import IngestError

    try:
        target = connector.Target.of(tracking_uri, registered_model, model_name=auditor_model,
                                     artifact_path=artifact_path, artifact_root=artifact_root,
                                     tag_prefix=tag_prefix, field_map=_field_map(fields) or None)
    except connector.ConnectorError as exc:
        raise click.BadParameter(str(exc)) from None
    outgoing_destination(target.tracking_uri, allow_private, "--tracking-uri")
    with _session(url) as session:
        workspace = resolve_workspace(session, workspace)
    max_bytes = load_settings().max_upload_bytes
    from auditor.db import make_engine, make_session_factory

    engine = make_engine(url)
    try:
        factory = make_session_factory(engine)
        try:
            result = connector.sync(factory, dataset, target, workspace=workspace, versions=list(versions) or None,
                                    max_bytes=max_bytes, submitted_by=f"{_who()} mlflow")
        except (connector.ConnectorError, IngestError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"connected {target.registered_model!r} at {target.tracking_uri} to dataset {result.dataset!r} "
                   f"(workspace {result.workspace!r}) as model {target.model_name!r}")
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
        for v in result.versions:
            click.echo(f"version {v.version}: {v.status}: {v.message}")
        if not result.versions:
            click.echo("the registered model has no versions yet")
        if result.changed:
            _request_audit(result.dataset_id, url)
        if write_back:
            try:
                out = connector.write_back(factory, result.dataset_id, base_url=load_worker_settings().base_url)
            except connector.ConnectorError as exc:
                raise click.ClickException(f"write-back failed: {exc}") from None
            if out["state"] == "no_audit":
                click.echo("write-back: the dataset has no finished audit yet; the workers write after it")
            else:
                for name, written in out.get("written", {}).items():
                    click.echo(f"write-back of audit run {out['run_id']}: {name}: version(s) "
                               f"{', '.join(written) or 'none'} tagged")
                for note in out.get("notes", []):
                    click.echo(f"write-back: {note}")
                if out.get("errors"):
                    raise click.ClickException("write-back failed: " + "; ".join(out["errors"]))
    finally:
        engine.dispose()
    asked = set(versions)
    failed = [v for v in result.versions if v.status == "rejected" or (v.status == "skipped" and v.version in asked)]
    if failed:
        raise click.ClickException(f"{len(failed)} version(s) not imported: "
                                   f"{', '.join(v.version for v in failed)} (see above)")
