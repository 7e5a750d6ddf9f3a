"""Bulk ingestion endpoints: JSON bodies, CSV/JSONL bodies or multipart uploads, answered with 202.

Validation, idempotency and the all-or-nothing rule are the ingestion use cases'
(``auditor.ingest``, shared with the CLI); this module only turns an HTTP request into
their arguments, commits, and asks the workers for an audit.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import shutil
import tempfile
import zlib

from flask import current_app, g, request
from sqlalchemy import select, update

from auditor.db import Annotation, Annotator, ImportBatch, Role
from auditor.ingest import (
    ImportRejected,
    IngestError,
    import_annotations,
    import_gold,
    import_predictions,
)
from auditor.ingest.attempts import record_rejected
from auditor.ingest.errors import UploadTooLarge
from auditor.web.api import serializers as s
from auditor.web.api.common import get_dataset, get_release
from auditor.web.api.framework import LabelStudioBody, Param, endpoint
from auditor.web.errors import ApiError
from auditor.web.metrics import record_import

__all__ = ["submit_annotations", "submit_gold", "submit_predictions"]

log = logging.getLogger(__name__)

# Content type of a raw body → the ingestion format it holds (None: detect csv/wide from the header).
_RAW_FORMATS = {
    "text/csv": None,
    "text/tab-separated-values": "tsv",
    "application/x-ndjson": "jsonl",
    "application/jsonl": "jsonl",
    "application/x-jsonlines": "jsonl",
}
FILE_FORMAT = Param("file_format", "string", "Format of an uploaded file (default: detected from its name "
                    "and first bytes).", enum=("csv", "tsv", "wide", "jsonl", "label-studio"))
FIELD = Param("field", "string", "Read FIELD from COLUMN, as the CLI's --field: FIELD:COLUMN (or FIELD=COLUMN) "
              "pairs, comma-separated or repeated, e.g. item_id:uid,probabilities:probs. Fields: "
              "item_id, annotator_id, label, labels, probabilities, vendor, tier, timestamp, source.",
              max_length=2000)
IDEMPOTENCY = Param("idempotency_key", "string", "Re-sending a batch with the same key changes nothing "
                    "(the Idempotency-Key header works too).", max_length=200)


def _ingest_limit() -> str:
    return current_app.config["AUDITOR_INGEST_LIMIT"]


def _source(body: dict | None, file_format: str | None) -> tuple[object, str | None, str]:
    """(bytes or stream, format, name) of the batch in this request."""
    if isinstance(body, LabelStudioBody):
        # A JSON list is a Label Studio export (a list of tasks), posted as it was exported.
        return body.spool, "label-studio", "request.json"
    if request.is_json:
        # The JSON form is the JSONL form, one object per record: same fields, same checks.
        records = body["records"]
        data = "\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode("utf-8")
        return data, "jsonl", "request.json"
    mimetype = request.mimetype
    if mimetype == "multipart/form-data":
        upload = request.files.get("file")
        if upload is None:
            raise ApiError(400, "A multipart upload must carry the batch in a field named 'file'.", field="file")
        name = (upload.filename or "upload")[-200:]
        return upload.stream, file_format, name
    if mimetype in _RAW_FORMATS:
        # Spool the body (the limit on its size is already enforced by the request stream):
        # the reader passes over a batch more than once (checksum, format, rows).
        spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)
        shutil.copyfileobj(request.stream, spool)
        spool.seek(0)
        return spool, file_format or _RAW_FORMATS[mimetype], f"request.{mimetype.split('/')[-1]}"
    raise ApiError(415, f"Unsupported Content-Type {mimetype!r}: send application/json, text/csv, "
                        "application/x-ndjson, text/tab-separated-values or a multipart/form-data file.",
                   field="Content-Type")


def _options(idempotency_key: str | None) -> dict:
    key = idempotency_key or request.headers.get("Idempotency-Key") or None
    if request.mimetype == "multipart/form-data":
        key = key or request.form.get("idempotency_key") or None
    if request.is_json:
        parsed = g.get("json_body")
        key = key or (parsed.get("idempotency_key") if isinstance(parsed, dict) else None)
    if key is not None and (len(key) > 200 or "\x00" in key):
        raise ApiError(400, "idempotency_key must be at most 200 characters.", field="idempotency_key")
    return {"idempotency_key": key}


def _field_map() -> dict[str, str]:
    """The ``field`` query parameters (each may hold comma-separated pairs) as a field map."""
    from auditor.ingest.batch import parse_field_map

    pairs = [p for raw in request.args.getlist("field") for p in raw.split(",") if p.strip()]
    try:
        return parse_field_map(pairs)
    except IngestError as exc:
        raise ApiError(400, str(exc), field="field") from None


def _reject(db, principal, dataset, kind: str, fmt: str | None, name: str | None, exc: ApiError,
            errors=(), bad_rows: int = 0) -> ApiError:
    """Record the rejected attempt (its first errors, never its rows) and return the error to raise.

    Recording is best effort: whatever goes wrong there, the client still gets its 4xx."""
    db.rollback()
    try:
        record_rejected(db, dataset.id, kind=kind, format=fmt, source_name=name, submitted_by=principal.email,
                        submitted_by_id=principal.user_id, status_code=exc.status, message=exc.message,
                        errors=errors, bad_rows=bad_rows)
        db.commit()
    except Exception as err:  # (the database may be the reason the import failed)
        db.rollback()
        log.warning("could not record a rejected import on dataset %s (%s)", dataset.id, err.__class__.__name__)
    return exc


def _run(db, principal, dataset, fn, *args, **kwargs) -> dict:
    # End the read-only transaction of the lookups: the import opens its own writing one.
    db.commit()
    kind = fn.__name__.removeprefix("import_")
    fmt, name = kwargs.get("format"), getattr(args[0], "name", None) if args else None

    def rejected(exc: ApiError, errors=(), bad_rows: int = 0) -> ApiError:
        return _reject(db, principal, dataset, kind, fmt, name, exc, errors, bad_rows)

    try:
        result = fn(db, dataset, *args, workspace=principal.workspace_slug, submitted_by=principal.email, **kwargs)
    except UploadTooLarge as exc:
        raise rejected(ApiError(413, str(exc), field="body")) from None
    except ImportRejected as exc:
        record_import(kind, "rejected", exc.bad_rows)
        errors = [{"row": e.row, "field": e.field, "message": e.reason} for e in exc.errors]
        first = exc.errors[0] if exc.errors else None
        others = exc.bad_rows - 1
        listed = len({e.row for e in exc.errors})
        message = ("Batch rejected, nothing was written: " + (str(first) if first else "invalid batch") +
                   (f" (and {others} more bad row{'s' if others != 1 else ''}"
                    + (f"; the first {listed} are listed in errors" if exc.bad_rows > listed else "") + ")"
                    if others > 0 else ""))
        raise rejected(ApiError(400, message, field=first.field if first else None, errors=errors,
                                code="batch_rejected"), errors, exc.bad_rows) from None
    except IngestError as exc:
        record_import(kind, "rejected", 0)
        raise rejected(ApiError(400, str(exc), code="batch_rejected")) from None
    except UnicodeDecodeError as exc:
        record_import(kind, "rejected", 0)
        raise rejected(ApiError(400, f"The upload is not UTF-8 text: {exc.reason}.", field="file")) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        # A gzip upload cut short or corrupt: the client's file, not our failure.
        record_import(kind, "rejected", 0)
        raise rejected(ApiError(400, f"The upload could not be decompressed: {exc}.", field="file")) from None
    return result


def _accepted(db, principal, dataset, result) -> dict:
    if result.batch_id is not None and result.changed:
        db.execute(update(ImportBatch).where(ImportBatch.id == result.batch_id)
                   .values(submitted_by_id=principal.user_id))
    db.commit()
    record_import(result.kind, "accepted" if result.changed else result.status, result.rows if result.changed else 0)
    if result.changed:
        from auditor.worker.dispatch import request_audit

        request_audit(dataset.id)
    return {"batch_id": result.batch_id, "data_version": result.data_version, "dataset_id": dataset.id,
            "kind": result.kind, "status": result.status, "rows": result.rows, "inserted": result.inserted,
            "updated": result.updated, "unchanged": result.unchanged, "new_items": result.new_items,
            "new_annotators": result.new_annotators, "duplicate": result.status == "duplicate",
            "message": result.message}


_ACCEPTED = s.ref("Accepted")


@endpoint("POST", "/datasets/<int:dataset_id>/annotations", summary="Submit annotations", tag="ingestion",
          roles={Role.ADMIN, Role.VENDOR}, body=s.BODIES["AnnotationsIngest"], body_name="AnnotationsIngest",
          uploads=True, response=_ACCEPTED, status=202, limit=_ingest_limit,
          query=[FILE_FORMAT, IDEMPOTENCY, FIELD,
                 Param("vendor", "string", "Vendor of rows that name none.", max_length=200),
                 Param("tier", "string", "Tier of rows that name none.", enum=("crowd", "expert"))])
def submit_annotations(principal, db, dataset_id, file_format, idempotency_key, field, vendor, tier, body=None):
    """One batch of annotations (item_id, annotator_id, label[, vendor, tier, timestamp]), all or nothing.

    A vendor token may submit only to the datasets it is granted, only as its own vendor.
    """
    ds = get_dataset(principal, db, dataset_id)
    if principal.role == Role.VENDOR:
        if not principal.vendor:
            raise ApiError(403, "This vendor account has no vendor name; ask an admin to set one.")
        if vendor is not None and vendor != principal.vendor:
            raise ApiError(403, f"A vendor token submits as {principal.vendor!r} only.", field="vendor")
        vendor = principal.vendor
    data, fmt, name = _source(body, file_format)
    if fmt == "jsonl" and request.is_json and isinstance(body, dict):
        # the records object, checked against its schema (a Label Studio body is not)
        vendor = vendor or body.get("vendor")
        tier = tier or body.get("tier")
    if principal.role == Role.VENDOR and tier is not None and tier != "crowd":
        # The expert tier puts annotators on every vendor's expert panel: admins and analysts decide it.
        raise ApiError(403, "A vendor cannot set the tier; only admins and analysts register experts.",
                       field="tier")
    src = _named(data, name)
    result = _run(db, principal, ds, import_annotations, src, format=fmt, vendor=vendor, tier=tier,
                  field_map=_field_map(), may_set_tier=principal.role != Role.VENDOR, **_options(idempotency_key))
    if principal.role == Role.VENDOR and result.changed:
        # Every annotator of the batch must be this vendor's: rows naming another vendor,
        # or another vendor's annotator ids, are refused and the batch rolled back.
        foreign = db.execute(select(Annotator.external_id, Annotator.vendor)
                             .join(Annotation, Annotation.annotator_id == Annotator.id)
                             .where(Annotation.dataset_id == ds.id, Annotation.batch_id == result.batch_id,
                                    Annotator.vendor.is_distinct_from(principal.vendor)).limit(1)).first()
        if foreign is not None:
            raise _reject(db, principal, ds, "annotations", fmt, name, ApiError(
                403, f"Annotator {foreign[0]!r} belongs to vendor {foreign[1]!r}, not to {principal.vendor!r}; "
                     "nothing was written.", field="vendor"))
    return _accepted(db, principal, ds, result)


@endpoint("POST", "/datasets/<int:dataset_id>/gold", summary="Submit gold labels", tag="ingestion",
          roles={Role.ADMIN, Role.ANALYST}, body=s.BODIES["GoldIngest"], body_name="GoldIngest", uploads=True,
          response=_ACCEPTED, status=202, limit=_ingest_limit,
          query=[FILE_FORMAT, IDEMPOTENCY, FIELD,
                 Param("source", "string", "Where the gold labels come from (e.g. 'adjudicated').", max_length=200)])
def submit_gold(principal, db, dataset_id, file_format, idempotency_key, field, source, body=None):
    """One batch of gold labels (item_id, label[, source]), all or nothing."""
    ds = get_dataset(principal, db, dataset_id)
    data, fmt, name = _source(body, file_format)
    if fmt in ("wide", "label-studio"):
        raise ApiError(400, "Gold labels come as csv, tsv or jsonl.", field="file_format")
    if request.is_json and isinstance(body, dict):
        source = source or body.get("source")
    result = _run(db, principal, ds, import_gold, _named(data, name), format=fmt, gold_source=source,
                  field_map=_field_map(), **_options(idempotency_key))
    return _accepted(db, principal, ds, result)


@endpoint("POST", "/datasets/<int:dataset_id>/predictions", summary="Submit predictions", tag="ingestion",
          roles={Role.ADMIN, Role.ANALYST}, body=s.BODIES["PredictionsIngest"], body_name="PredictionsIngest",
          uploads=True, response=_ACCEPTED, status=202, limit=_ingest_limit,
          query=[Param("release_id", "integer", "The release these predictions are of (or name it with model "
                       "and release)."),
                 Param("model", "string", "The model's name (created on first use); with release, instead of "
                       "release_id.", max_length=200),
                 Param("release", "string", "The release's version (created on first use); with model.",
                       max_length=200),
                 FILE_FORMAT, IDEMPOTENCY, FIELD])
def submit_predictions(principal, db, dataset_id, release_id, model, release, file_format, idempotency_key, field,
                       body=None):
    """One release's predictions (item_id, label and/or probabilities), all or nothing.

    The release is ``release_id``, or ``model`` and ``release`` by name (both created on
    first use, as the CLI's ``--model``/``--release`` do).
    """
    ds = get_dataset(principal, db, dataset_id)
    if release_id is not None:
        if model is not None or release is not None:
            raise ApiError(400, "Name the release by release_id or by model and release, not both.",
                           field="release_id")
        rel = get_release(principal, db, release_id)
        model, release = rel.model.name, rel.version
    elif model is None or release is None or not model.strip() or not release.strip():
        raise ApiError(400, "Query parameter 'release_id' is required (or 'model' and 'release', by name).",
                       field="release_id" if model is None and release is None else
                       ("model" if model is None or not model.strip() else "release"))
    if file_format == "wide":
        raise ApiError(400, "Predictions come as csv, tsv, jsonl or label-studio.", field="file_format")
    data, fmt, name = _source(body, file_format)
    result = _run(db, principal, ds, import_predictions, _named(data, name), format=fmt, model=model.strip(),
                  release=release.strip(), field_map=_field_map(), **_options(idempotency_key))
    return _accepted(db, principal, ds, result)


def _named(data, name: str):
    """The ingestion reader names its source after the file object's ``name``."""
    from auditor.ingest.formats import open_source

    # A compressed upload may decompress to no more than an uncompressed one may be.
    limit = current_app.config.get("MAX_CONTENT_LENGTH") or (1 << 30)
    if isinstance(data, bytes):
        return open_source(data, name=name, max_decompressed=limit)
    return open_source(data if hasattr(data, "read") else io.BytesIO(data), name=name, max_decompressed=limit)
