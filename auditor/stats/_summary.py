"""Plain-text summaries of results (statsmodels' habit): the number format and the
table layout shared by every ``summary()``."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = []


def num(x, digits: int = 4, *, sign: bool = False) -> str:
    """``x`` with ``digits`` decimals; a string as it is; "—" for None, NaN or infinity."""
    if isinstance(x, str):
        return x
    if x is None or not math.isfinite(float(x)):
        return "—"
    return f"{float(x):{'+' if sign else ''}.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, widths: Sequence[int],
          align: str | None = None) -> list[str]:
    """Lines of a table, each column at least its ``widths`` entry wide (and its
    header's); ``align`` has an "l" or "r" per column (default: the first column left,
    the others right)."""
    w = [max(width, len(h)) for width, h in zip(widths, header, strict=True)]
    align = align or "l" + "r" * (len(w) - 1)
    if len(align) != len(w):
        raise ValueError(f"`align` has {len(align)} letters for {len(w)} columns.")

    def line(cells: Sequence[str]) -> str:
        return "".join(f"{c:{'<' if a == 'l' else '>'}{wi}}" for c, a, wi in zip(cells, align, w, strict=True)).rstrip()

    return [line(header), *(line(r) for r in rows)]
