"""The API's route table: every operation declared once, with its parameters, body and roles.

Views receive parsed, validated arguments; the same declarations generate the OpenAPI
document (``openapi.py``), so the two cannot drift apart.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request
from jsonschema import Draft202012Validator
from sqlalchemy import Select, func, select
from werkzeug.wsgi import wrap_file

from auditor.db import Role
from auditor.web import cache
from auditor.web.db import get_session
from auditor.web.errors import ApiError
from auditor.web.security import hash_token, limiter, load_principal

__all__ = ["MAX_JSON_BODY_BYTES", "OPERATIONS", "LabelStudioBody", "Listing", "Operation", "Param", "bp", "endpoint"]

bp = Blueprint("api", __name__, url_prefix="/api/v1")

OPERATIONS: list[Operation] = []

# Ids are 32-bit in most tables: anything larger cannot exist (and would overflow a query).
MAX_ID = 2**31 - 1
MAX_PER_PAGE = 500
CSV_MAX_ROWS = 1_000_000
CSV_IN_MEMORY = 4 << 20
#: The largest JSON body parsed whole (a document takes many times its size in memory once
#: parsed); larger batches go as JSONL, CSV or Label Studio files, which are streamed.
MAX_JSON_BODY_BYTES = 8 << 20


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    type: str  # "integer", "number", "string", "boolean"
    description: str
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] | None = None
    default: Any = None
    max_length: int = 512

    def schema(self) -> dict:
        s: dict[str, Any] = {"type": self.type}
        if self.type == "integer":
            s["minimum"] = self.minimum if self.minimum is not None else 1
            s["maximum"] = self.maximum if self.maximum is not None else MAX_ID
        if self.type == "string":
            s["maxLength"] = self.max_length
        if self.enum:
            s["enum"] = list(self.enum)
        if self.default is not None:
            s["default"] = self.default
        return s

    def parse(self, raw: str) -> Any:
        if "\x00" in raw:
            raise ApiError(400, f"Query parameter '{self.name}' must not contain NUL characters.", field=self.name)
        if self.type == "integer":
            try:
                value = int(raw)
            except ValueError:
                raise ApiError(400, f"Query parameter '{self.name}' must be an integer; got {raw[:40]!r}.",
                               field=self.name) from None
            lo = self.minimum if self.minimum is not None else 1
            hi = self.maximum if self.maximum is not None else MAX_ID
            if not lo <= value <= hi:
                raise ApiError(400, f"Query parameter '{self.name}' must be between {lo} and {hi}; got {value}.",
                               field=self.name)
            return value
        if self.type == "boolean":
            if raw.lower() in ("true", "1", "yes"):
                return True
            if raw.lower() in ("false", "0", "no"):
                return False
            raise ApiError(400, f"Query parameter '{self.name}' must be true or false; got {raw[:40]!r}.",
                           field=self.name)
        if len(raw) > self.max_length:
            raise ApiError(400, f"Query parameter '{self.name}' is longer than {self.max_length} characters.",
                           field=self.name)
        if self.enum and raw not in self.enum:
            raise ApiError(400, f"Query parameter '{self.name}' must be one of {', '.join(self.enum)}; "
                                f"got {raw[:40]!r}.", field=self.name)
        return raw


PAGE = Param("page", "integer", "Page number, from 1.", minimum=1, maximum=1_000_000, default=1)
PER_PAGE = Param("per_page", "integer", f"Rows per page (at most {MAX_PER_PAGE}).", minimum=1,
                 maximum=MAX_PER_PAGE, default=50)
FORMAT = Param("format", "string", "Answer as JSON (default) or as a CSV download of every matching row.",
               enum=("json", "csv"), default="json")


@dataclass
class Listing:
    """A list answer: a SQL statement (paginated by the framework) or an in-memory list of rows."""

    source: Select | Sequence[Any]
    serialize: Callable[[Any], dict]
    columns: Sequence[str]
    filename: str = "export"
    # One serialized row may expand to several CSV rows (a power curve's points).
    csv_rows: Callable[[dict], Iterable[dict]] | None = None
    # The statement selects plain columns: serialize each row's mapping (no ORM objects built).
    mapping: bool = False

    def row(self, r, *, paged: bool):
        if self.mapping:
            return self.serialize(r._mapping)
        return self.serialize(_unwrap(r[:-1] if paged else r))


@dataclass
class Operation:
    method: str
    rule: str
    view: Callable[..., Any]
    summary: str
    tag: str
    roles: frozenset[Role]
    query: tuple[Param, ...] = ()
    body: dict | None = None
    body_name: str | None = None
    uploads: bool = False
    response: dict | None = None
    status: int = 200
    listing: bool = False
    description: str = ""
    public: bool = False
    cache: bool = False
    validator: Draft202012Validator | None = field(default=None, repr=False)

    @property
    def operation_id(self) -> str:
        return self.view.__name__


def endpoint(method: str, rule: str, *, summary: str, tag: str, roles: Iterable[Role] = (),
             query: Sequence[Param] = (), body: dict | None = None, body_name: str | None = None,
             uploads: bool = False, response: dict | None = None, status: int = 200,
             listing: bool = False, description: str = "", public: bool = False,
             limit: Callable[[], str] | None = None, cache: bool = False):
    """Declare an operation of the route table and register its view (``limit``: a rate limit)."""

    def decorate(fn):
        params = tuple(query) + ((PAGE, PER_PAGE, FORMAT) if listing else ())
        op = Operation(method, rule, fn, summary, tag, frozenset(roles), params, body, body_name, uploads,
                       response, status, listing, description or (fn.__doc__ or "").strip(), public, cache,
                       Draft202012Validator(body) if body is not None else None)
        OPERATIONS.append(op)
        view = _view(op)
        if limit is not None:
            view = limiter.limit(limit, key_func=_caller_key)(view)
        bp.add_url_rule(rule, endpoint=fn.__name__, view_func=view, methods=[method])
        return fn

    return decorate


def _view(op: Operation):
    def view(**path):
        for name, value in path.items():
            if isinstance(value, int) and value > MAX_ID:
                raise ApiError(404, f"No such {name.removesuffix('_id')}.", field=name)
            if isinstance(value, str):
                _check_text(value, name)
        db = get_session()
        principal = None
        if not op.public:
            # Cookies may authenticate reads only (CSV links of the dashboards); every write
            # needs a bearer token, so no cross-site form can forge one.
            principal = load_principal(allow_session=request.method == "GET",
                                       with_fingerprint=op.cache and request.method == "GET")
            if principal is None:
                raise ApiError(401, "Authentication required: send 'Authorization: Bearer <token>'.")
            if principal.role not in op.roles:
                raise ApiError(403, f"The {principal.role.value} role may not {op.summary[0].lower()}{op.summary[1:]}.")
        args = {}
        for p in op.query:
            raw = request.args.get(p.name)
            if raw is None or raw == "":
                if p.required:
                    raise ApiError(400, f"Query parameter '{p.name}' is required.", field=p.name)
                args[p.name] = p.default
            else:
                args[p.name] = p.parse(raw)
        if op.body is not None and not (op.uploads and not request.is_json):
            args["body"] = parse_json_body(op)
        fmt = args.pop("format", "json")
        page, per_page = args.pop("page", 1), args.pop("per_page", 50)
        found = cache.lookup(principal) if op.cache else None
        if found is not None:
            store, key, hit = found
            if hit is not None:
                return hit
            return cache.answer(store, key, lambda: _answer(op, db, op.view(principal, db, **path, **args), fmt,
                                                            page, per_page))
        return _answer(op, db, op.view(principal, db, **path, **args), fmt, page, per_page)

    view.__name__ = op.view.__name__
    return view


def _answer(op: Operation, db, result, fmt: str, page: int, per_page: int) -> Response:
    if isinstance(result, Response):
        return result
    if isinstance(result, Listing):
        return _csv(db, result) if fmt == "csv" else jsonify(_page(db, result, page, per_page))
    response = jsonify(result)
    response.status_code = op.status
    return response


def _caller_key() -> str:
    # Limits count per API token (so one busy client cannot starve the others), else per address.
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return "token:" + hash_token(header[7:].strip())[:32]
    return "addr:" + (request.remote_addr or "unknown")


class LabelStudioBody(list):
    """A Label Studio export posted as the JSON body: not parsed here, but spooled (``spool``)
    for the ingestion reader, which parses it one task at a time."""

    def __init__(self, spool):
        super().__init__()
        self.spool = spool


def _spooled_body():
    """The request body in a temporary file (in memory while small); the upload limit holds."""
    spool = tempfile.SpooledTemporaryFile(max_size=MAX_JSON_BODY_BYTES)
    shutil.copyfileobj(request.stream, spool, 1 << 16)
    spool.seek(0)
    return spool


def _starts_a_list(spool) -> bool:
    head = spool.read(4096).lstrip(b"\xef\xbb\xbf").lstrip()
    spool.seek(0)
    return head.startswith(b"[")


def _read_json(op: Operation) -> Any:
    """The JSON body, parsed whole only up to :data:`MAX_JSON_BODY_BYTES`: a JSON document
    becomes many times its size in memory. A Label Studio export posted to an upload
    operation is passed on unparsed (:class:`LabelStudioBody`)."""
    if not request.is_json:
        return None
    length = request.content_length
    if op.uploads:
        spool = _spooled_body()
        if request.args.get("file_format") == "label-studio" or _starts_a_list(spool):
            return LabelStudioBody(spool)
        spool.seek(0, 2)
        length = spool.tell()
        spool.seek(0)
        reader = spool
    else:
        reader = request.stream
    if length is not None and length > MAX_JSON_BODY_BYTES:
        raise _json_too_large()
    data = reader.read(MAX_JSON_BODY_BYTES + 1)
    if len(data) > MAX_JSON_BODY_BYTES:
        raise _json_too_large()
    try:
        return current_app.json.loads(data)
    except ValueError:
        return None


def _json_too_large() -> ApiError:
    return ApiError(413, f"A JSON body may be at most {MAX_JSON_BODY_BYTES:,} bytes: send larger batches as "
                         "JSONL, CSV or a Label Studio file, which are read as they arrive.", field="body")


def parse_json_body(op: Operation) -> Any:
    body = _read_json(op)
    if isinstance(body, LabelStudioBody):
        return body  # read (and checked) as that format
    if body is None:
        raise ApiError(415 if not request.is_json else 400,
                       "The request body must be JSON (Content-Type: application/json).", field="body")
    g.json_body = body
    check_json_text(body)
    if op.uploads and isinstance(body, list):
        return body
    errors = sorted(op.validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        details = [{"field": _path(e.absolute_path) or "body", "message": _short(e.message)} for e in errors[:20]]
        first = details[0]
        raise ApiError(400, f"{first['field']}: {first['message']}", field=first["field"], errors=details)
    return body


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


def _check_text(value: str, where: str) -> None:
    if "\x00" in value:
        raise ApiError(400, f"{where} must not contain NUL characters.", field=where)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, f"{where} is not valid Unicode text.", field=where) from None


def check_json_text(node: Any, where: str = "") -> None:
    """Refuse NUL characters and lone surrogates anywhere in a parsed JSON document (400
    naming where): PostgreSQL stores neither. Iterative, so any depth the parser took is fine."""
    stack = [(node, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            _check_text(value, at or "body")
        elif isinstance(value, dict):
            for k, v in value.items():
                _check_text(k, at or "body")
                stack.append((v, f"{at}.{k}" if at else str(k)))
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))


def _page(db, listing: Listing, page: int, per_page: int) -> dict:
    if isinstance(listing.source, Select):
        # The total rides along as a window count: one round trip instead of two.
        rows = db.execute(listing.source.add_columns(func.count().over().label("_total"))
                          .limit(per_page).offset((page - 1) * per_page)).all()
        if rows:
            total = rows[0][-1]
        else:
            total = db.scalar(select(func.count()).select_from(listing.source.order_by(None).subquery()))
        items = [listing.row(r, paged=True) for r in rows]
    else:
        total = len(listing.source)
        items = [listing.serialize(r) for r in listing.source[(page - 1) * per_page: page * per_page]]
    return {"items": items, "page": page, "per_page": per_page, "total": total}


def _unwrap(row):
    return row[0] if len(row) == 1 else row


_FORMULA = re.compile(r"^[=+\-@\t\r]")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(",", ":"))
    if isinstance(value, str) and _FORMULA.match(value):
        # A spreadsheet would run '=...' as a formula (CSV injection): make it text.
        return "'" + value
    return value


def _csv(db, listing: Listing) -> Response:
    """The whole listing as CSV, written to a spooled file before the answer starts.

    The rows are read while the request's session is open; the answer then streams from
    the file, so a slow or vanished client never holds a database connection.
    """
    if isinstance(listing.source, Select):
        result = db.execute(listing.source.limit(CSV_MAX_ROWS).execution_options(yield_per=2000))
        rows = (listing.row(r, paged=False) for r in result)
    else:
        rows = (listing.serialize(r) for r in listing.source)
    spool = tempfile.SpooledTemporaryFile(max_size=16 << 20, mode="w+b")
    text = io.TextIOWrapper(spool, encoding="utf-8", newline="")
    writer = csv.DictWriter(text, fieldnames=list(listing.columns), extrasaction="ignore")
    writer.writeheader()
    for item in rows:
        for row in (listing.csv_rows(item) if listing.csv_rows else (item,)):
            writer.writerow({k: _cell(row.get(k)) for k in listing.columns})
    text.flush()
    size = spool.tell()
    spool.seek(0)
    text.detach()
    if size <= CSV_IN_MEMORY:
        # Small enough to hold (and to cache) as one body.
        response = Response(spool.read(), mimetype="text/csv")
        spool.close()
    else:
        response = Response(wrap_file(request.environ, spool, buffer_size=1 << 16), mimetype="text/csv",
                            direct_passthrough=True)
        response.content_length = size
    response.headers["Content-Disposition"] = f'attachment; filename="{listing.filename}.csv"'
    return response
