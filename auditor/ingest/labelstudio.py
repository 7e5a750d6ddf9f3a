"""One reading of a Label Studio annotation's content, shared by the file import of Label
Studio exports (:mod:`auditor.ingest.formats`) and the live connector
(:mod:`auditor.connectors.labelstudio.mapping`).

:func:`read_annotation` says what an annotation is — cancelled, empty (nothing chosen), a
vote or a ground truth — and its single choice, naming each problem by its path inside the
annotation (``result[0].value.choices``). Each caller then maps the choice to a label code,
and reads the annotation's identity (its id, task, user, time) as its path needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CANCELLED", "EMPTY", "GOLD", "VOTE", "AnnotationContent", "Problem", "find_choice", "read_annotation"]

VOTE, GOLD, CANCELLED, EMPTY = "vote", "gold", "cancelled", "empty"


@dataclass(frozen=True)
class Problem:
    #: Path inside the annotation (``result[1]``, ``result[0].value.choices``, ``ground_truth``).
    where: str
    reason: str


@dataclass(frozen=True)
class AnnotationContent:
    """What one annotation says: ``state`` (:data:`VOTE`, :data:`GOLD`, :data:`CANCELLED`,
    :data:`EMPTY`), its ``choice`` (a vote's or ground truth's), the path of that choice,
    whether its result held anything at all, and the problems found (none: it can be used)."""

    state: str
    choice: str | None = None
    choice_at: str | None = None
    has_result: bool = False
    problems: list[Problem] = field(default_factory=list)


def _boolean(ann: Mapping[str, Any], key: str, problems: list[Problem]) -> bool:
    value = ann.get(key)
    if value is not None and not isinstance(value, bool):
        problems.append(Problem(key, "expected true or false"))
        return False
    return bool(value)


def find_choice(result: list, *, from_name: str | None = None) -> tuple[str | None, str | None, list[Problem]]:
    """(choice, its path, problems) of the one Choices result of ``result`` (of the control
    ``from_name`` when given); (None, None, []) when there is none."""
    found: tuple[int, Any] | None = None
    for i, region in enumerate(result):
        if not isinstance(region, dict):
            return None, None, [Problem(f"result[{i}]", "expected an object")]
        value = region.get("value")
        if region.get("type", "choices") != "choices" or not isinstance(value, dict) or "choices" not in value:
            continue
        if from_name is not None and region.get("from_name") != from_name:
            continue
        if found is not None:
            return None, None, [Problem(f"result[{i}]", f"a second choices result (the first is result[{found[0]}]); "
                                                        "name the control with --from-name")]
        found = (i, value["choices"])
    if found is None:
        return None, None, []
    i, choices = found
    path = f"result[{i}].value.choices"
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], str):
        return None, path, [Problem(path, f"expected exactly one choice, got {str(choices)[:80]}")]
    return choices[0], path, []


def read_annotation(ann: Mapping[str, Any], *, from_name: str | None = None) -> AnnotationContent:
    """The content of one annotation object (see the module docstring)."""
    problems: list[Problem] = []
    cancelled = _boolean(ann, "was_cancelled", problems)
    ground_truth = _boolean(ann, "ground_truth", problems)
    result = ann.get("result")
    if result is None:
        result = []
    if not isinstance(result, list):
        problems.append(Problem("result", f"expected a list of results, not {type(result).__name__}"))
        result = []
    if cancelled:
        return AnnotationContent(CANCELLED, has_result=bool(result), problems=problems)
    choice, path, found = find_choice(result, from_name=from_name)
    problems += found
    state = (GOLD if ground_truth else VOTE) if choice is not None else EMPTY
    return AnnotationContent(state, choice, path, bool(result), problems)
