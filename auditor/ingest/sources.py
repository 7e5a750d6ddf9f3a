"""Import files as sources, and the low-level record readers under the formats.

A :class:`Source` is one uploaded or named file (gzip-compressed or not, its decompressed
size capped by :data:`MAX_DECOMPRESSED_BYTES`), read in chunks with every line at most
:data:`MAX_LINE_BYTES`; :func:`open_source` makes one and :func:`detect_format` guesses
its format. Under the readers of :mod:`auditor.ingest.formats` sit the record iterators
here: decoded lines, CSV/TSV rows, JSON lines and the tasks of a JSON list parsed one at a
time (each at most :data:`MAX_TASK_BYTES` and :data:`MAX_JSON_DEPTH` levels deep), all
reporting bad rows to one error collector that stops the read once there are enough.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError, UploadTooLarge

_CHUNK = 1 << 20


#: The longest line of a line-oriented file (CSV, TSV, NDJSON) the readers accept.
MAX_LINE_BYTES = 16 << 20


#: What a compressed upload may decompress to at most (the web layer passes its upload limit).
MAX_DECOMPRESSED_BYTES = 1 << 30


class _Capped(io.RawIOBase):
    """A decompressing stream that stops with :class:`UploadTooLarge` past ``limit`` bytes.

    A gzip upload of 1 MB can inflate a thousandfold; the limit is checked as the bytes
    come out, so the work and memory of a bomb end at the limit.
    """

    def __init__(self, fh: IO[bytes], limit: int, name: str):
        self._fh, self._limit, self._name, self._seen = fh, limit, name, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._fh.read(len(buffer))
        self._seen += len(data)
        if self._seen > self._limit:
            raise UploadTooLarge(f"{self._name}: decompresses to more than {self._limit:,} bytes, the upload limit")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._fh.close()
        super().close()


@dataclass(frozen=True)
class Source:
    """A re-readable byte source (decompressed), with a name for messages."""

    name: str
    _open: Callable[[], IO[bytes]]
    size: int | None = None

    def open(self) -> IO[bytes]:
        return self._open()

    def chunks(self, progress: Callable[[int], None] | None = None, *, max_line: int | None = None) -> Iterator[bytes]:
        """The bytes in chunks; with ``max_line``, a line longer than that rejects the file at its row."""
        line, rows = 0, 0
        with self.open() as fh:
            while chunk := fh.read(_CHUNK):
                if progress is not None:
                    progress(len(chunk))
                if max_line is not None:
                    last = chunk.rfind(b"\n")
                    if last < 0:
                        line += len(chunk)
                    else:
                        first = chunk.find(b"\n")
                        if line + first > max_line or _longest_inner_line(chunk, first, last) > max_line:
                            raise _line_too_long(self.name, rows + _row_of_long_line(chunk, line, max_line))
                        rows += chunk.count(b"\n", 0, last + 1)
                        line = len(chunk) - last - 1
                    if line > max_line:
                        raise _line_too_long(self.name, rows)
                yield chunk

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        return digest.hexdigest()

    def head(self, n: int = 65536) -> bytes:
        with self.open() as fh:
            return fh.read(n)


def _longest_inner_line(chunk: bytes, first: int, last: int) -> int:
    """Length of the longest line wholly inside ``chunk`` between its first and last newline."""
    if first == last:
        return 0
    return max(len(x) for x in chunk[first + 1:last].split(b"\n"))


def _row_of_long_line(chunk: bytes, carried: int, max_line: int) -> int:
    """Newlines before the first over-long line of ``chunk`` (whose first line continues ``carried`` bytes)."""
    for k, part in enumerate(chunk.split(b"\n")):
        if len(part) + (carried if k == 0 else 0) > max_line:
            return k
    return 0


def _line_too_long(name: str, row: int) -> ImportRejected:
    """The rejection of a file with an over-long line; ``row`` counts as everywhere (a CSV header is 0)."""
    return ImportRejected([RowError(row, None, f"the line is longer than {MAX_LINE_BYTES:,} bytes")], source=name)


class _Borrowed(io.RawIOBase):
    """Reads a caller's file object without closing it (the caller owns it)."""

    def __init__(self, fh: IO[bytes]):
        self._fh = fh

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._fh.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _is_gzip(opener: Callable[[], IO[bytes]]) -> bool:
    with opener() as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_source(source: str | Path | bytes | IO[bytes], *, name: str | None = None,
                max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> Source:
    """A :class:`Source` over a path, bytes or a binary file object (spooled if unseekable).

    A gzip source is decompressed as it is read, never past ``max_decompressed`` bytes
    (:class:`UploadTooLarge` then).
    """
    if isinstance(source, Source):
        return source
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        raw: Callable[[], IO[bytes]] = lambda: open(path, "rb")  # noqa: E731
        name = name or str(path)
        size: int | None = path.stat().st_size
    elif isinstance(source, bytes | bytearray):
        data = bytes(source)
        raw = lambda: io.BytesIO(data)  # noqa: E731
        name = name or "<upload>"
        size = len(data)
    else:
        fh = source
        if not (hasattr(fh, "seekable") and fh.seekable()):
            spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)
            shutil.copyfileobj(fh, spool)
            spool.seek(0)
            fh = spool
        start = fh.tell()

        def raw() -> IO[bytes]:
            fh.seek(start)
            return io.BufferedReader(_Borrowed(fh))

        name = name or getattr(source, "name", None) or "<upload>"
        size = None
    if _is_gzip(raw):
        label = str(name)
        return Source(label, lambda: io.BufferedReader(_Capped(gzip.open(raw(), "rb"), max_decompressed, label),
                                                       1 << 16), None)
    return Source(str(name), raw, size)


def detect_format(source: Source, kind: str) -> str:
    """Guess the format from the file name and its first bytes."""
    name = source.name.lower().removesuffix(".gz")
    head = source.head(4096).lstrip(codecs.BOM_UTF8).lstrip()
    if name.endswith((".jsonl", ".ndjson")) or head.startswith(b"{"):
        return "jsonl"
    if head.startswith(b"["):
        return "label-studio"
    return "tsv" if name.endswith((".tsv", ".tab")) else "csv"


class _Errors:
    """Collects row errors; stops the read once there are enough to report."""

    def __init__(self, source: Source, progress: Callable[[int], None] | None = None):
        self.source = source
        self.progress = progress
        self.errors: list[RowError] = []
        self.bad_rows: set[int] = set()

    def add(self, row: int, field: str | None, reason: str) -> None:
        # Keep the first errors to report, but count every bad row so the answer can say the total.
        self.bad_rows.add(row)
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(RowError(row, field, reason))

    def raise_if_any(self) -> None:
        if self.errors:
            raise ImportRejected(self.errors, source=self.source.name, bad_rows=len(self.bad_rows))


def _decoded_lines(source: Source, errors: _Errors, first_row: int) -> Iterator[str]:
    """Lines decoded one by one, so a bad byte is reported at its row."""
    progress, pending = errors.progress, 0
    with source.open() as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b"")):
            if len(raw) > MAX_LINE_BYTES:
                # read no further: a line this long is a broken or hostile file
                raise _line_too_long(source.name, lineno + first_row)
            if progress is not None:
                pending += len(raw)
                if pending >= _CHUNK:
                    progress(pending)
                    pending = 0
            try:
                line = raw.decode("utf-8-sig" if lineno == 0 else "utf-8")
            except UnicodeDecodeError as exc:
                errors.add(lineno + first_row, None,
                           f"not valid UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
                continue
            yield line


#: The widest CSV/TSV file read (a wide file has one column per annotator).
MAX_COLUMNS = 100_000


def _csv_records(source: Source, errors: _Errors, delimiter: str) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    lines = _decoded_lines(source, errors, first_row=0)
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
        if len(header) > MAX_COLUMNS:
            # each column is a Python object per row: a 16 MB header line of commas is 16 million
            errors.add(0, None, f"the header has {len(header):,} columns; at most {MAX_COLUMNS:,}")
            errors.raise_if_any()
        header = [h.strip() for h in header]
    except StopIteration:
        errors.add(0, None, "the file is empty")
        errors.raise_if_any()
        raise AssertionError("unreachable") from None
    except csv.Error as exc:
        errors.add(0, None, f"cannot read the header: {_csv_problem(exc)}")
        errors.raise_if_any()
        raise

    def records() -> Iterator[tuple[int, list[str]]]:
        row = 0
        while True:
            try:
                rec = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                errors.add(row + 1, None, f"malformed CSV: {_csv_problem(exc)}")
                return
            row += 1
            if not rec:
                continue
            if len(rec) != len(header):
                more = "more" if len(rec) > len(header) else "fewer"
                errors.add(row, None, f"{more} than the header's {len(header)} columns (found {len(rec)})")
                continue
            yield row, rec

    return header, records()


def _csv_problem(exc: csv.Error) -> str:
    """The csv module's complaint, in the file's terms (a lone CR is old Mac line ends)."""
    if "new-line character seen in unquoted field" in str(exc):
        return ("a line holds a carriage return (CR) outside quotes: lines ending with CR alone are not "
                "read; save the file with LF or CRLF line ends")
    return str(exc)


def _jsonl_records(source: Source, errors: _Errors) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for row, line in enumerate(_decoded_lines(source, errors, first_row=1), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.add(row, None, f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            errors.add(row, None, "the JSON is nested too deeply")
            continue
        if not isinstance(rec, dict):
            errors.add(row, None, f"expected a JSON object, found {type(rec).__name__}")
            continue
        yield row, rec


#: The largest Label Studio task (its JSON text) read: as the longest line of a CSV or JSONL
#: file, it bounds the memory one task takes while it is parsed.
MAX_TASK_BYTES = 2 << 20


class _TaskBudget(io.RawIOBase):
    """A byte stream that refuses to give more than ``limit`` bytes between two :meth:`reset`
    calls (one per task parsed), and drops a leading UTF-8 byte order mark."""

    def __init__(self, fh: IO[bytes], limit: int, on_over: Callable[[], Exception]):
        self._fh, self._limit, self._on_over = fh, limit, on_over
        self._since, self._first = 0, True

    def readable(self) -> bool:
        return True

    def reset(self) -> None:
        self._since = 0

    def readinto(self, buffer) -> int:
        data = self._fh.read(len(buffer))
        if self._first and data:
            self._first = False
            if data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):] or self._fh.read(len(buffer))
        self._since += len(data)
        if self._since > self._limit + _CHUNK:  # ijson reads ahead by at most one buffer
            raise self._on_over()
        buffer[: len(data)] = data
        return len(data)


def _json_list_items(source: Source, errors: _Errors) -> Iterator[tuple[int, Any]]:
    """(row, element) of a JSON document's top-level list, parsed one element at a time.

    A Label Studio export is one JSON list; read whole, a 3.6 MB ``.json.gz`` took a web
    process to 6 GB. Here memory is bounded by the largest element (:data:`MAX_TASK_BYTES`)
    and nesting by :data:`MAX_JSON_DEPTH` (the parser's own item builder names each level's
    path, which is quadratic in the depth).
    """
    import ijson

    head = source.head(4096).lstrip(codecs.BOM_UTF8).lstrip()
    if not head.startswith(b"["):
        errors.add(0, None, "a Label Studio export is a JSON list of tasks")
        errors.raise_if_any()
    row = 0

    def over() -> Exception:
        return ImportRejected([RowError(row + 1, None, f"the task is larger than {MAX_TASK_BYTES:,} bytes")],
                              source=source.name)

    with source.open() as fh:
        budget = _TaskBudget(fh, MAX_TASK_BYTES, over)
        events = ijson.basic_parse(io.BufferedReader(budget, _CHUNK), use_float=True)
        try:
            for item in _top_level_items(events):
                row += 1
                budget.reset()
                yield row, item
        except _TooDeep:
            errors.add(row + 1, None, f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep")
        except ijson.JSONError as exc:
            errors.add(row + 1, None, f"not valid JSON ({str(exc)[:200]})")
        except UnicodeDecodeError as exc:
            errors.add(row + 1, None, f"not valid UTF-8 text ({exc.reason})")
    errors.raise_if_any()


#: The deepest nesting a Label Studio task may have (an export's is about 6 levels).
MAX_JSON_DEPTH = 64


class _TooDeep(Exception):
    pass


def _top_level_items(events: Iterator[tuple[str, Any]]) -> Iterator[Any]:
    """The elements of the top-level JSON list whose parser events are ``events``, built one by one."""
    stack: list[Any] = []  # the containers being built; stack[0] is the top-level list (kept empty)
    keys: list[Any] = []  # the pending key of each container on the stack (maps only)

    def place(value: Any) -> Any:
        if len(stack) == 1:
            return value
        parent = stack[-1]
        if isinstance(parent, dict):
            parent[keys[-1]] = value
        else:
            parent.append(value)
        return _NOTHING

    for event, value in events:
        if event == "map_key":
            keys[-1] = value
            continue
        if event in ("start_map", "start_array"):
            if len(stack) > MAX_JSON_DEPTH:
                raise _TooDeep
            stack.append({} if event == "start_map" else [])
            keys.append(None)
            continue
        if event in ("end_map", "end_array"):
            keys.pop()
            value = stack.pop()
            if not stack:
                return  # the end of the top-level list
        done = place(value)
        if done is not _NOTHING:
            yield done


_NOTHING = object()
