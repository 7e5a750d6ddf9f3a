"""MLflow model registry: a registered model's versions become releases, and every audit's
verdicts go back to the registry as model version tags.

:func:`sync` (``auditor connect mlflow``) stores the connection of a registered model to a
dataset and imports, for every version (or the ones named), the predictions in an
artifact of the version (a CSV/TSV/JSONL or Parquet file of ``item_id`` and ``label``,
or ``item_id`` and ``probabilities`` / one probability column per label) as the release
``<model> <version>`` through the ordinary prediction import: validated, all or nothing
per version, and idempotent (a version imported before is a no-op; a new version is a new
release). :func:`write_back` (a worker task after every audit of the dataset) sets the
tags ``auditor.certified``, ``auditor.S_anytime``, ``auditor.L``, ``auditor.U_t``,
``auditor.survey_equivalence`` and ``auditor.audit_run_url`` (and a few more) on every
connected version from the dataset's latest finished audit.

The ``mlflow`` client (the ``mlflow`` extra: ``mlflow-skinny``) is imported only here and
only when called. Credentials never reach the database: the client reads them from the
environment (``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``...).
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from auditor.connectors.errors import ConnectorError
from auditor.db.models import (
    AuditRun,
    AuditStatus,
    Certification,
    Dataset,
    MlflowConnector,
    Model,
    PowerCurveRecord,
    Release,
    Workspace,
)
from auditor.db.session import WRITE_OPTIONS, session_scope

__all__ = [
    "ARTIFACT_ROOTS",
    "DEFAULT_ARTIFACT_PATH",
    "DEFAULT_TAG_PREFIX",
    "MAX_VERSIONS",
    "REJECTED_TAG",
    "ConnectResult",
    "ConnectorError",
    "RegistryUnavailable",
    "Target",
    "VersionResult",
    "dataset_with_connector",
    "http_limits",
    "record_write_back",
    "sweep",
    "sync",
    "tag_rejected",
    "verdict_tags",
    "write_back",
]

log = logging.getLogger(__name__)

DEFAULT_ARTIFACT_PATH = "predictions.csv"
DEFAULT_TAG_PREFIX = "auditor."
#: ``run``: the artifact path is inside the version's run; ``model``: inside the registered model files.
ARTIFACT_ROOTS = ("run", "model")
#: A sync without ``versions`` considers the newest this many versions (the older ones are reported).
MAX_VERSIONS = 200
#: Largest artifact (and largest Parquet file once converted) a sync reads.
DEFAULT_MAX_BYTES = 1 << 30
_TRACKING_SCHEMES = ("http", "https", "databricks", "databricks-uc")
_TAG_PREFIX = re.compile(r"^[A-Za-z0-9_.\-/]{1,64}$")
_PARQUET = (".parquet", ".pq")
_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# MLflow errors that the same request will meet again: the write-back does not retry them.
_PERMANENT_CODES = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "PERMISSION_DENIED",
                              "UNAUTHENTICATED", "INVALID_STATE", "BAD_REQUEST", "NOT_FOUND"})


class RegistryUnavailable(ConnectorError):
    """The MLflow server failed in a way that may pass (connection refused, timeout, 5xx)."""

    retryable = True


# --- the connection ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A registered model of one tracking server, and how its versions map to releases."""

    tracking_uri: str
    registered_model: str
    model_name: str
    artifact_path: str = DEFAULT_ARTIFACT_PATH
    artifact_root: str = "run"
    tag_prefix: str = DEFAULT_TAG_PREFIX
    field_map: Mapping[str, str] | None = None

    @classmethod
    def of(cls, tracking_uri: str, registered_model: str, *, model_name: str | None = None,
           artifact_path: str = DEFAULT_ARTIFACT_PATH, artifact_root: str = "run",
           tag_prefix: str = DEFAULT_TAG_PREFIX, field_map: Mapping[str, str] | None = None) -> Target:
        """A checked target; a bad value is a :class:`ConnectorError` naming the option."""
        uri = (tracking_uri or "").strip().rstrip("/")
        parts = urlsplit(uri)
        if not (uri == "databricks" or parts.scheme in _TRACKING_SCHEMES):
            raise ConnectorError(f"tracking URI {tracking_uri!r}: expected http(s)://host[:port] or databricks")
        if parts.username or parts.password:
            raise ConnectorError("the tracking URI must not hold credentials: set MLFLOW_TRACKING_TOKEN or "
                                 "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD in the environment instead")
        if len(uri) > 1000:
            raise ConnectorError("the tracking URI is longer than 1000 characters")
        name = (registered_model or "").strip()
        if not name or len(name) > 500:
            raise ConnectorError("the registered model name must have 1 to 500 characters")
        if "'" in name and '"' in name:
            raise ConnectorError(f"registered model {name!r}: a name with both kinds of quote cannot be searched")
        model = (model_name or name).strip()
        if not model or len(model) > 200:
            raise ConnectorError("the Auditor model name must have 1 to 200 characters")
        path = (artifact_path or "").strip()
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path or len(path) > 1000:
            raise ConnectorError(f"artifact path {artifact_path!r}: expected a relative path such as "
                                 f"{DEFAULT_ARTIFACT_PATH} (no '..', at most 1000 characters)")
        suffix = pure.suffix.lower()
        if suffix not in _FORMATS and suffix not in _PARQUET:
            raise ConnectorError(f"artifact path {artifact_path!r}: the file must end in .csv, .tsv, .jsonl, "
                                 f".ndjson or .parquet")
        if artifact_root not in ARTIFACT_ROOTS:
            raise ConnectorError(f"artifact root {artifact_root!r}: expected one of {list(ARTIFACT_ROOTS)}")
        if not _TAG_PREFIX.match(tag_prefix or ""):
            raise ConnectorError(f"tag prefix {tag_prefix!r}: 1 to 64 letters, digits, '_', '.', '-' or '/'")
        return cls(uri, name, model, str(pure), artifact_root, tag_prefix, dict(field_map) if field_map else None)

    @classmethod
    def from_row(cls, row: MlflowConnector) -> Target:
        return cls(row.tracking_uri, row.registered_model, row.model_name, row.artifact_path, row.artifact_root,
                   row.tag_prefix, row.field_map)


def _mlflow():
    try:
        import mlflow
    except ImportError as exc:
        raise ConnectorError("the MLflow client is not installed: pip install 'auditor[mlflow]'") from exc
    return mlflow


def _client(target: Target):
    mlflow = _mlflow()
    return mlflow.MlflowClient(tracking_uri=target.tracking_uri, registry_uri=target.tracking_uri)


@contextmanager
def http_limits(*, retries: int, timeout: float) -> Iterator[None]:
    """MLflow's HTTP retries and timeout for the block (its ``MLFLOW_HTTP_REQUEST_*`` variables),
    unless the environment sets them; no progress bars. A worker fails fast and retries later
    rather than holding a slot through MLflow's own minutes of back-off."""
    values = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(retries)),
              "MLFLOW_HTTP_REQUEST_TIMEOUT": str(math.ceil(timeout)),
              "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    added = [k for k in values if k not in os.environ]
    for k in added:
        os.environ[k] = values[k]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _code(exc: BaseException) -> str | None:
    return getattr(exc, "error_code", None)


def _registry_error(target: Target, exc: BaseException, doing: str) -> ConnectorError:
    message = getattr(exc, "message", None) or str(exc)
    text = f"MLflow at {target.tracking_uri}: {doing}: {message}"[:2000]
    return ConnectorError(text) if _code(exc) in _PERMANENT_CODES else RegistryUnavailable(text)


# --- reading versions and their artifacts ------------------------------------------------


@dataclass(frozen=True)
class FetchedVersion:
    """One model version and its downloaded predictions; ``status`` ``skipped`` (no usable
    artifact) or ``rejected`` (too large, unreadable) has no ``path`` and a ``note`` saying why."""

    version: str
    run_id: str | None
    source: str | None
    created: datetime | None
    artifact_uri: str | None = None
    path: Path | None = None
    fmt: str | None = None
    status: str = "ready"
    note: str = ""


def _search_filter(name: str) -> str:
    return f"name='{name}'" if "'" not in name else f'name="{name}"'


def _versions(client, target: Target) -> list:
    try:
        client.get_registered_model(target.registered_model)
    except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
        if _code(exc) == "RESOURCE_DOES_NOT_EXIST":
            raise ConnectorError(f"MLflow at {target.tracking_uri} has no registered model "
                                 f"{target.registered_model!r}") from None
        raise _registry_error(target, exc, "reading the registered model") from None
    out, token = [], None
    while True:
        try:
            page = client.search_model_versions(_search_filter(target.registered_model), page_token=token)
        except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
            raise _registry_error(target, exc, "listing the model versions") from None
        out.extend(mv for mv in page if mv.name == target.registered_model)
        token = getattr(page, "token", None)
        if not token:
            break
    return sorted(out, key=lambda mv: int(mv.version))


def _artifact_base(client, target: Target, mv) -> str:
    if target.artifact_root == "run":
        if not mv.run_id:
            raise LookupError("the version has no run; use --artifact-root model")
        return client.get_run(mv.run_id).info.artifact_uri
    return client.get_model_version_download_uri(target.registered_model, mv.version)


def _fetch_one(client, mlflow, target: Target, mv, dest: Path, max_bytes: int) -> FetchedVersion:
    version = str(mv.version)
    created = (datetime.fromtimestamp(mv.creation_timestamp / 1000, tz=UTC)
               if getattr(mv, "creation_timestamp", None) else None)
    base = FetchedVersion(version, mv.run_id or None, getattr(mv, "source", None), created)
    if getattr(mv, "status", "READY") not in ("READY", None):
        return _skip(base, f"the version is {mv.status}, not READY")
    pure = PurePosixPath(target.artifact_path)
    try:
        root = _artifact_base(client, target, mv).rstrip("/")
        parent = f"{root}/{pure.parent}" if str(pure.parent) != "." else root
        listing = mlflow.artifacts.list_artifacts(artifact_uri=parent, tracking_uri=target.tracking_uri)
    except LookupError as exc:
        return _skip(base, str(exc))
    except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
        if _code(exc) == "RESOURCE_DOES_NOT_EXIST":
            return _skip(base, f"its {target.artifact_root} artifacts cannot be found ({getattr(exc, 'message', exc)})")
        raise _registry_error(target, exc, f"listing the artifacts of version {version}") from None
    entry = next((f for f in listing or [] if not f.is_dir and PurePosixPath(f.path).name == pure.name), None)
    uri = f"{root}/{target.artifact_path}"
    if entry is None:
        return _skip(base, f"no artifact {target.artifact_path!r} in the version's {target.artifact_root}")
    if entry.file_size is not None and entry.file_size > max_bytes:
        return _skip(base, f"{target.artifact_path} is {entry.file_size} bytes; at most {max_bytes} are read",
                     rejected=True)
    where = dest / f"v{version}"
    where.mkdir(parents=True, exist_ok=True)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(where),
                                                         tracking_uri=target.tracking_uri))
    except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
        raise _registry_error(target, exc, f"downloading {uri}") from None
    if local.stat().st_size > max_bytes:
        return _skip(base, f"{target.artifact_path} is {local.stat().st_size} bytes; at most {max_bytes} are read",
                     rejected=True)
    suffix = pure.suffix.lower()
    if suffix in _PARQUET:
        converted = where / "predictions.jsonl"
        try:
            _parquet_to_jsonl(local, converted, max_bytes)
        except ValueError as exc:
            return _skip(base, f"{target.artifact_path}: {exc}", rejected=True)
        local, fmt = converted, "jsonl"
    else:
        fmt = _FORMATS[suffix]
    return FetchedVersion(version, base.run_id, base.source, created, uri, local, fmt)


def _skip(base: FetchedVersion, note: str, *, rejected: bool = False) -> FetchedVersion:
    return FetchedVersion(base.version, base.run_id, base.source, base.created,
                          status="rejected" if rejected else "skipped", note=note)


def _parquet_to_jsonl(src: Path, dst: Path, max_bytes: int) -> None:
    """A Parquet file as JSON lines (a list column of probabilities stays a list); a file that is
    no Parquet, or that would expand past ``max_bytes``, is a ValueError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = 0
    try:
        pf = pq.ParquetFile(src)
        with open(dst, "w", encoding="utf-8") as out:
            for batch in pf.iter_batches(batch_size=16_384):
                for rec in batch.to_pylist():
                    line = json.dumps(rec, default=str, ensure_ascii=False) + "\n"
                    written += len(line)
                    if written > max_bytes:
                        raise ValueError(f"expands past {max_bytes} bytes of rows")
                    out.write(line)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"not a readable Parquet file ({exc})") from None


def fetch(target: Target, dest: Path, *, versions: Sequence[str] | None = None,
          max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[FetchedVersion], list[str]]:
    """Download the predictions of ``versions`` (default: the newest :data:`MAX_VERSIONS`) into
    ``dest``; returns them (oldest first) and notes. A server that cannot be reached, or a
    registered model or named version that does not exist, is a :class:`ConnectorError`."""
    mlflow = _mlflow()
    client = _client(target)
    found = _versions(client, target)
    notes: list[str] = []
    if versions:
        wanted = [str(v).strip() for v in versions]
        by_version = {str(mv.version): mv for mv in found}
        unknown = [v for v in wanted if v not in by_version]
        if unknown:
            raise ConnectorError(f"registered model {target.registered_model!r} has no version(s) "
                                 f"{', '.join(unknown)} (it has {', '.join(sorted(by_version, key=int)) or 'none'})")
        chosen = [by_version[v] for v in sorted(set(wanted), key=int)]
    else:
        chosen = found[-MAX_VERSIONS:]
        if len(found) > MAX_VERSIONS:
            notes.append(f"{len(found) - MAX_VERSIONS} older version(s) not considered (at most {MAX_VERSIONS} "
                         f"per sync; name them with --version)")
    out = [_fetch_one(client, mlflow, target, mv, dest, max_bytes) for mv in chosen]
    return out, notes


# --- importing them as releases ----------------------------------------------------------


@dataclass(frozen=True)
class VersionResult:
    """What a sync did with one model version: ``imported``, ``duplicate`` / ``unchanged`` (nothing
    new), ``skipped`` (no usable artifact) or ``rejected`` (invalid rows; nothing written)."""

    version: str
    status: str
    message: str
    release_id: int | None = None
    data_version: int | None = None


@dataclass
class ConnectResult:
    connector_id: int
    dataset_id: int
    dataset: str
    workspace: str
    target: Target
    versions: list[VersionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(v.status == "imported" for v in self.versions)

    @property
    def rejected(self) -> list[VersionResult]:
        return [v for v in self.versions if v.status == "rejected"]


def _named(path: Path, name: str) -> io.BufferedReader:
    raw = io.FileIO(path)
    raw.name = name  # what errors name: the version and artifact, not a temporary path
    return io.BufferedReader(raw)


def upsert_connector(session: Session, ds: Dataset, target: Target) -> MlflowConnector:
    row = session.scalar(select(MlflowConnector).where(MlflowConnector.dataset_id == ds.id,
                                                       MlflowConnector.tracking_uri == target.tracking_uri,
                                                       MlflowConnector.registered_model == target.registered_model))
    if row is None:
        row = MlflowConnector(dataset_id=ds.id, tracking_uri=target.tracking_uri,
                              registered_model=target.registered_model)
        session.add(row)
    row.model_name, row.artifact_path, row.artifact_root = target.model_name, target.artifact_path, target.artifact_root
    row.tag_prefix, row.field_map = target.tag_prefix, dict(target.field_map) if target.field_map else None
    session.flush()
    return row


def import_versions(session: Session, ds: Dataset, target: Target, fetched: Sequence[FetchedVersion], *,
                    submitted_by: str | None = None) -> list[VersionResult]:
    """Each fetched version's predictions as the release ``target.model_name`` / version, one
    batch each (all or nothing per version; a version imported before is a no-op)."""
    from auditor import ingest

    out = []
    for v in fetched:
        if v.path is None:
            out.append(VersionResult(v.version, v.status, v.note))
            continue
        tags = {"mlflow": {"tracking_uri": target.tracking_uri, "registered_model": target.registered_model,
                           "version": v.version, "run_id": v.run_id, "source": v.source,
                           "artifact_uri": v.artifact_uri}}
        label = f"{target.registered_model} version {v.version}: {target.artifact_path}"
        with _named(v.path, label) as source:
            try:
                res = ingest.import_predictions(session, ds, source, model=target.model_name, release=v.version,
                                                format=v.fmt, field_map=target.field_map, released_at=v.created,
                                                tags=tags, submitted_by=submitted_by)
            except ingest.IngestError as exc:
                out.append(VersionResult(v.version, "rejected", str(exc)))
                continue
        release_id = session.scalar(select(Release.id).join(Model).where(
            Model.workspace_id == ds.workspace_id, Model.name == target.model_name, Release.version == v.version))
        out.append(VersionResult(v.version, res.status, res.message, release_id, res.data_version))
    return out


#: The tag (after the connector's prefix) a rejected version gets, its value the reason.
REJECTED_TAG = "rejected"
#: MLflow keeps at most 5,000 characters of a model version tag's value.
_MAX_TAG_VALUE = 5000


def tag_rejected(target: Target, results: Sequence[VersionResult], *, client=None) -> list[str]:
    """Tag every rejected version ``<prefix>rejected`` with the reason (MLflow's client API);
    returns notes of the tags that could not be set (the import stands either way)."""
    notes = []
    rejected = [v for v in results if v.status == "rejected"]
    if not rejected:
        return notes
    client = client or _client(target)
    for v in rejected:
        try:
            client.set_model_version_tag(target.registered_model, v.version, target.tag_prefix + REJECTED_TAG,
                                         v.message[:_MAX_TAG_VALUE])
        except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
            notes.append(f"version {v.version}: the {target.tag_prefix}{REJECTED_TAG} tag could not be set "
                         f"({getattr(exc, 'message', None) or exc})"[:500])
    return notes


def _known_versions(session: Session, ds: Dataset, target: Target) -> set[str]:
    return set(session.scalars(select(Release.version).join(Model, Release.model_id == Model.id).where(
        Model.workspace_id == ds.workspace_id, Model.name == target.model_name)))


def sweep(factory: sessionmaker[Session], connector_id: int, *, max_bytes: int = DEFAULT_MAX_BYTES,
          timeout: float = 60.0) -> ConnectResult:
    """Import the versions of a connected registered model that Auditor does not hold yet
    (the periodic sweep: versions registered after ``auditor connect mlflow``).

    A version already imported (a release of the connector's model with that version) or
    already tagged ``<prefix>rejected`` is not downloaded again; a version not READY yet is
    skipped and looked at again next time. Rejected versions are tagged with the reason.
    Raises :class:`ConnectorError` (:class:`RegistryUnavailable` when the server may come back).
    """
    with session_scope(factory) as session:
        row = session.get(MlflowConnector, connector_id)
        if row is None:
            raise ConnectorError(f"no MLflow connector {connector_id}")
        target, ds = Target.from_row(row), session.get(Dataset, row.dataset_id)
        known, ds_id, ds_name = _known_versions(session, ds, target), ds.id, ds.name
        workspace = session.scalar(select(Workspace.slug).where(Workspace.id == ds.workspace_id))
    mlflow = _mlflow()
    rejected_key = target.tag_prefix + REJECTED_TAG
    with tempfile.TemporaryDirectory(prefix="auditor-mlflow-") as tmp, http_limits(retries=0, timeout=timeout):
        client = _client(target)
        found = _versions(client, target)
        new = [mv for mv in found if str(mv.version) not in known and rejected_key not in (_tags_of(mv))]
        notes = []
        if len(new) > MAX_VERSIONS:
            notes.append(f"{len(new) - MAX_VERSIONS} older new version(s) left for the next sweeps")
            new = new[:MAX_VERSIONS]
        fetched = [_fetch_one(client, mlflow, target, mv, Path(tmp), max_bytes) for mv in new]
        results: list[VersionResult] = []
        if fetched:
            with session_scope(factory) as session:
                session.connection(execution_options=WRITE_OPTIONS)
                ds = session.get(Dataset, ds_id)
                results = import_versions(session, ds, target, fetched, submitted_by=f"mlflow connector {connector_id}")
        notes += tag_rejected(target, results, client=client)
    out = ConnectResult(connector_id, ds_id, ds_name, workspace, target, results, notes)
    if results:
        log.info("MLflow connector %s: %s", connector_id,
                 ", ".join(f"version {v.version}: {v.status}" for v in results))
    return out


def _tags_of(mv) -> dict[str, str]:
    tags = getattr(mv, "tags", None) or {}
    return dict(tags) if isinstance(tags, Mapping) else {}


def sync(factory: sessionmaker[Session], dataset: str, target: Target, *, workspace: str,
         versions: Sequence[str] | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
         submitted_by: str | None = None) -> ConnectResult:
    """Connect ``target`` to ``dataset`` (stored, so that audits write back) and import its
    versions' predictions. The downloads happen outside any database transaction; the
    connection and the imports are then written in one (each version a batch of its own)."""
    from auditor import ingest

    with session_scope(factory) as session:
        ingest.get_dataset(session, dataset, workspace=workspace)  # an unknown dataset fails before any download
    with tempfile.TemporaryDirectory(prefix="auditor-mlflow-") as tmp, http_limits(retries=2, timeout=60):
        fetched, notes = fetch(target, Path(tmp), versions=versions, max_bytes=max_bytes)
        with session_scope(factory) as session:
            session.connection(execution_options=WRITE_OPTIONS)
            ds = ingest.get_dataset(session, dataset, workspace=workspace)
            row = upsert_connector(session, ds, target)
            results = import_versions(session, ds, target, fetched, submitted_by=submitted_by)
            out = ConnectResult(row.id, ds.id, ds.name, workspace, target, results, notes)
        out.notes.extend(tag_rejected(target, results))
        return out


# --- writing the verdicts back ----------------------------------------------------------


def dataset_with_connector(session: Session, run_id: int) -> int | None:
    """The dataset of audit run ``run_id`` if it has an MLflow connector, else None."""
    return session.scalar(select(AuditRun.dataset_id).join(MlflowConnector, MlflowConnector.dataset_id ==
                                                            AuditRun.dataset_id).where(AuditRun.id == run_id).limit(1))


def _num(x: float | None, digits: int = 6) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.{digits}g}"


def _equivalence(curves: Sequence[PowerCurveRecord]) -> tuple[str, str, str]:
    """The hard-label survey equivalence, its interval and its Monte Carlo error ("0" when
    the curve was computed exactly, "undetermined" when the draws do not pin it)."""
    # Every release has the hard-label curve (majority / plurality vote scored by agreement).
    c = next((c for c in curves if c.scorer == "agreement" and c.combiner in ("majority", "plurality")), None)
    if c is None:
        return "n/a", "n/a", "n/a"
    value = _num(c.equivalence, 4) if c.equivalence is not None else (c.equivalence_note or "n/a")
    interval = f"[{_num(c.equivalence_low, 4)}, {_num(c.equivalence_high, 4)}]"
    if c.equivalence is None:
        error = "n/a"
    elif c.method != "monte_carlo":
        error = "0"
    else:
        error = _num(c.equivalence_mc_error, 3) if c.equivalence_mc_error is not None else "undetermined"
    return value, interval, error


def verdict_tags(cert: Certification, curves: Sequence[PowerCurveRecord], run: AuditRun, ds: Dataset, model_id: int, *,
                 prefix: str = DEFAULT_TAG_PREFIX, base_url: str | None = None) -> dict[str, str]:
    """The model version tags of one release's certification in one audit."""
    s_anytime = cert.s_anytime_t if cert.certified_with == "U_t" else cert.s_anytime_e
    equivalence, interval, mc_error = _equivalence(curves)
    base = (base_url or "").rstrip("/")
    tags = {
        "certified": "true" if cert.certified else "false",
        "verdict": cert.verdict,
        "method": cert.method,
        "S_anytime": _num(s_anytime),
        "L": _num(cert.l),
        "U_t": _num(cert.u_t),
        "survey_equivalence": equivalence,
        "survey_equivalence_interval": interval,
        "survey_equivalence_mc_error": mc_error,
        "n_items": str(cert.n_items_lower),
        "dataset": ds.name,
        "data_version": str(run.data_version),
        "audit_run_url": f"{base}/api/v1/audit-runs/{run.id}",
        "dashboard_url": f"{base}/models/{model_id}?dataset_id={ds.id}",
        # Last: a version showing this run id shows all of this run's tags.
        "audit_run_id": str(run.id),
    }
    return {prefix + k: v for k, v in tags.items()}


@dataclass(frozen=True)
class _Plan:
    connector_id: int
    target: Target
    #: MLflow version → its tags
    versions: dict[str, dict[str, str]]


def _plan(session: Session, dataset_id: int, base_url: str | None) -> tuple[AuditRun | None, list[_Plan]]:
    connectors = list(session.scalars(select(MlflowConnector).where(MlflowConnector.dataset_id == dataset_id)
                                      .order_by(MlflowConnector.id)))
    if not connectors:
        return None, []
    run = session.scalar(select(AuditRun).where(AuditRun.dataset_id == dataset_id,
                                                AuditRun.status == AuditStatus.SUCCEEDED)
                         .order_by(AuditRun.data_version.desc(), AuditRun.id.desc()).limit(1))
    if run is None:
        return None, [_Plan(c.id, Target.from_row(c), {}) for c in connectors]
    ds = session.get(Dataset, dataset_id)
    rows = session.execute(select(Certification, Release, Model).join(Release, Certification.release_id == Release.id)
                           .join(Model, Release.model_id == Model.id)
                           .where(Certification.audit_run_id == run.id)).all()
    curves: dict[int, list[PowerCurveRecord]] = {}
    for c in session.scalars(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id == run.id,
                                                      PowerCurveRecord.release_id.is_not(None))):
        curves.setdefault(c.release_id, []).append(c)
    plans = []
    for conn in connectors:
        target = Target.from_row(conn)
        versions = {}
        for cert, rel, model in rows:
            meta = (rel.tags or {}).get("mlflow") if isinstance(rel.tags, dict) else None
            if (model.name != target.model_name or not isinstance(meta, dict)
                    or meta.get("registered_model") != target.registered_model
                    or meta.get("tracking_uri") != target.tracking_uri):
                continue
            versions[rel.version] = verdict_tags(cert, curves.get(rel.id, []), run, ds, model.id,
                                                 prefix=target.tag_prefix, base_url=base_url)
        plans.append(_Plan(conn.id, target, versions))
    return run, plans


def _write_tags(plan: _Plan, run_id: int) -> tuple[list[str], list[str]]:
    """Set one connector's tags; returns (versions written, notes). A failure raises
    :class:`ConnectorError` / :class:`RegistryUnavailable` at the first failed request."""
    client = _client(plan.target)
    written, notes = [], []
    key = plan.target.tag_prefix + "audit_run_id"
    for version, tags in sorted(plan.versions.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        try:
            current = dict(client.get_model_version(plan.target.registered_model, version).tags or {})
        except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
            if _code(exc) == "RESOURCE_DOES_NOT_EXIST":
                notes.append(f"version {version} no longer exists")
                continue
            raise _registry_error(plan.target, exc, f"reading version {version}") from None
        seen = current.get(key, "")
        if seen.isdigit() and int(seen) > run_id:
            notes.append(f"version {version} already shows the newer audit run {seen}")
            continue
        try:
            for k, v in tags.items():
                if current.get(k) != v:
                    client.set_model_version_tag(plan.target.registered_model, version, k, v)
        except Exception as exc:  # MlflowException, or a connection error of the HTTP stack
            raise _registry_error(plan.target, exc, f"tagging version {version}") from None
        written.append(version)
    return written, notes


def record_write_back(factory: sessionmaker[Session], connector_id: int, *, run_id: int,
                      error: str | None) -> None:
    """Record one write-back attempt of audit run ``run_id`` on its connector.

    Attempts can finish out of order: one started during an outage may time out after a
    later one, started once the server was back, has written the tags. So the record
    only moves forward by audit run: a success is kept unless a newer run's success is
    already there, and an error is kept only while no success of this run or a newer
    one is recorded (the registry already shows that audit; the stale error would say
    the opposite)."""
    with session_scope(factory) as session:
        row = session.get(MlflowConnector, connector_id, with_for_update=True)
        if row is None:
            return
        written = row.last_written_run_id
        if error is None:
            if written is None or run_id >= written:
                row.last_written_run_id, row.last_written_at, row.last_error = run_id, datetime.now(UTC), None
        elif written is None or run_id > written:
            row.last_error = error[:2000]


def write_back(factory: sessionmaker[Session], dataset_id: int, *, base_url: str | None = None,
               timeout: float = 10.0) -> dict[str, Any]:
    """Tag every connected model version with the verdict of the dataset's latest finished audit.

    Always the latest audit (a late retry never writes an older verdict over a newer one;
    a version already tagged from a newer run is left alone). Each connector's outcome is
    recorded on it (``last_written_run_id`` / ``last_error``). Raises
    :class:`RegistryUnavailable` if a server could not be reached (the caller retries),
    after the other connectors were written; other failures are recorded and reported.
    """
    with session_scope(factory) as session:
        run, plans = _plan(session, dataset_id, base_url)
        run_id = run.id if run is not None else None
        data_version = run.data_version if run is not None else None
    if not plans:
        return {"state": "no_connector", "dataset_id": dataset_id}
    if run_id is None:
        return {"state": "no_audit", "dataset_id": dataset_id}
    out: dict[str, Any] = {"state": "written", "dataset_id": dataset_id, "run_id": run_id,
                           "data_version": data_version, "written": {}, "notes": [], "errors": []}
    unavailable: RegistryUnavailable | None = None
    with http_limits(retries=0, timeout=timeout):
        for plan in plans:
            name = f"{plan.target.registered_model} at {plan.target.tracking_uri}"
            try:
                written, notes = _write_tags(plan, run_id)
            except ConnectorError as exc:
                log.warning("MLflow write-back of audit run %s to %s failed: %s", run_id, name, exc)
                record_write_back(factory, plan.connector_id, run_id=run_id, error=str(exc))
                out["errors"].append(str(exc))
                if isinstance(exc, RegistryUnavailable):
                    unavailable = exc
                continue
            record_write_back(factory, plan.connector_id, run_id=run_id, error=None)
            out["written"][name] = written
            out["notes"].extend(notes)
    if unavailable is not None:
        raise unavailable
    if out["errors"]:
        out["state"] = "failed"
    return out
