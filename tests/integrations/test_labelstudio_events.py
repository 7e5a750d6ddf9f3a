"""The Label Studio connector's data side, on SQLite and PostgreSQL, with events in the shapes
Label Studio 1.23 sends (captured from a real server: ``completed_by`` an id,
``ANNOTATIONS_DELETED`` with ids only), and its webhook endpoint through the real app.

Checked: each event applied all or nothing and at most once (retries, the pull meeting
what a webhook brought, late or out-of-order deliveries), ground truth as gold, updates as
re-labels with history, deletions as tombstones readable in past snapshots, vendors from
the map, bad payloads refused naming the field, and the endpoint's authentication and bounds.
"""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from auditor.audit.snapshot import load_snapshot
from auditor.connectors.labelstudio import PayloadRejected, VendorMap, configure
from auditor.connectors.labelstudio.events import MAX_EVENT_ANNOTATIONS, parse_event
from auditor.connectors.labelstudio.store import Changes, apply, read_spec
from auditor.db import make_session_factory, session_scope
from auditor.db.models import (
    Annotation,
    AnnotationHistory,
    Annotator,
    AuditOutbox,
    Dataset,
    ImportBatch,
    Item,
    LabelStudioConnector,
)
from auditor.ingest import create_dataset

LABELS = ["negative", "positive"]
LABEL_MAP = {"Neg": "negative", "Pos": "positive"}
T0 = datetime(2026, 11, 24, 22, 3, 39, tzinfo=UTC)
NS = "ls.example.org"


def when(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def annotation(ls_id: int, task: int, user, choice: str | None, t: float, *, gt: bool = False,
               cancelled: bool = False, project: int = 7) -> dict:
    result = [] if choice is None else [{"id": "x1", "from_name": "sentiment", "to_name": "text", "type": "choices",
                                         "origin": "manual", "value": {"choices": [choice]}}]
    return {"id": ls_id, "result": result, "was_cancelled": cancelled, "ground_truth": gt,
            "created_at": when(0), "updated_at": when(t), "draft_created_at": None, "lead_time": 3.2,
            "prediction": {}, "result_count": len(result), "unique_id": str(uuid.uuid4()), "import_id": None,
            "last_action": None, "bulk_created": False, "task": task, "project": project, "completed_by": user,
            "updated_by": user if isinstance(user, int) else user["id"], "parent_prediction": None,
            "parent_annotation": None, "last_created_by": None}


def task(task_id: int, item: str | None = None) -> dict:
    data = {"text": f"review {task_id}"} | ({"item_id": item} if item is not None else {})
    return {"id": task_id, "data": data, "meta": {}, "created_at": when(0), "updated_at": when(0), "is_labeled": True,
            "overlap": 1, "inner_id": task_id, "total_annotations": 1, "cancelled_annotations": 0,
            "total_predictions": 0, "project": 7, "updated_by": 1, "file_upload": None, "comment_authors": []}


def created(ann: dict, item: str, action: str = "ANNOTATION_CREATED") -> dict:
    return {"action": action, "annotation": ann, "task": task(ann["task"], item),
            "project": {"id": 7, "title": "reviews", "label_config": "<View/>"}}


def deleted(*ids: int) -> dict:
    return {"action": "ANNOTATIONS_DELETED", "annotations": [{"id": i} for i in ids], "project": {"id": 7}}


class Connector:
    """A connector of project 7 to a new dataset, and the use cases run as the web view runs them."""

    def __init__(self, engine, **options):
        self.factory = make_session_factory(engine)
        with session_scope(self.factory) as s:
            ws = f"ws-{uuid.uuid4().hex[:8]}"
            ds = create_dataset(s, "reviews", LABELS, workspace=ws)
            self.dataset_id, self.workspace_id = ds.id, ds.workspace_id
            conn, self.secret = configure(s, workspace=ws, dataset="reviews", url=f"http://{NS}/", project_id=7,
                                          token_env="LS_TOKEN", label_map=LABEL_MAP, **options)
            self.id = conn.id

    def send(self, body: dict, source: str = "webhook"):
        with self.factory() as s:
            conn = s.get(LabelStudioConnector, self.id)
            action, changes = parse_event(body, read_spec(conn, s.get(Dataset, conn.dataset_id)))
            s.commit()
            outcome = apply(s, conn, changes, source=source, action=action)
            s.commit()
        return outcome

    def pull(self, anns: list[tuple[dict, str]], **extra):
        """The pull sync's step for these annotations (what its listing said)."""
        with self.factory() as s:
            conn = s.get(LabelStudioConnector, self.id)
            spec = read_spec(conn, s.get(Dataset, conn.dataset_id))
            from auditor.connectors.labelstudio.mapping import Errors, parse_annotation

            errors, out = Errors(), []
            for ann, item in anns:
                out.append(parse_annotation(ann, task(ann["task"], item), spec, "a", errors))
            errors.raise_if_any()
            s.commit()
            outcome = apply(s, conn, Changes(annotations=out, **extra), source="pull", action="SYNC")
            s.commit()
        return outcome

    def state(self) -> dict:
        with session_scope(self.factory) as s:
            rows = s.execute(select(Item.external_id, Annotator.external_id, Annotation.label)
                             .join(Item, Item.id == Annotation.item_id)
                             .join(Annotator, Annotator.id == Annotation.annotator_id)
                             .where(Annotation.dataset_id == self.dataset_id)).all()
            votes = {(i, a.removeprefix(NS + "/")): LABELS[c] for i, a, c in rows}
            gold = {i: (LABELS[g], src) for i, g, src in s.execute(
                select(Item.external_id, Item.gold_label, Item.gold_source).where(
                    Item.dataset_id == self.dataset_id, Item.gold_label.is_not(None)))}
            history = sorted((h, i, a.removeprefix(NS + "/"), LABELS[c]) for h, i, a, c in s.execute(
                select(AnnotationHistory.change, Item.external_id, Annotator.external_id, AnnotationHistory.label)
                .join(Item, Item.id == AnnotationHistory.item_id)
                .join(Annotator, Annotator.id == AnnotationHistory.annotator_id)
                .where(AnnotationHistory.dataset_id == self.dataset_id)))
            counts = {i: list(c) for i, c in s.execute(select(Item.external_id, Item.label_counts).where(
                Item.dataset_id == self.dataset_id))}
            for i, vec in counts.items():  # the per-item counts agree with the rows
                assert vec == [sum(1 for (j, _), lab in votes.items() if j == i and lab == name) for name in LABELS]
            version = s.get(Dataset, self.dataset_id).data_version
            batches = s.scalar(select(ImportBatch.id).where(ImportBatch.dataset_id == self.dataset_id)
                               .order_by(ImportBatch.id.desc()).limit(1))
            outbox = s.scalars(select(AuditOutbox.data_version).where(AuditOutbox.dataset_id == self.dataset_id)).all()
        return {"votes": votes, "gold": gold, "history": history, "data_version": version, "last_batch": batches,
                "outbox": sorted(outbox)}


def test_events_map_to_votes_gold_relabels_and_tombstones(db_engine):
    c = Connector(db_engine)
    a1 = annotation(1, 11, 1, "Pos", 1)
    assert c.send(created(a1, "r1")).counts["inserted"] == 1
    a2 = annotation(2, 11, {"id": 2, "email": "Rater@Bolt.example.com", "first_name": "R"}, "Neg", 2)
    assert c.send(created(a2, "r1")).counts["inserted"] == 1
    # The same annotation as a plain id: one annotator whatever the export style.
    retry = c.send(created(annotation(2, 11, 2, "Neg", 2), "r1"))
    assert (retry.status, retry.counts["duplicates"], retry.batch_id) == ("unchanged", 1, None)
    state = c.state()
    assert state["votes"] == {("r1", "1"): "positive", ("r1", "2"): "negative"}
    assert state["outbox"] == [1, 2]  # each change asks for an audit, as an import does

    relabel = c.send(created(annotation(1, 11, 1, "Neg", 3), "r1", "ANNOTATION_UPDATED"))
    assert relabel.counts["relabeled"] == 1 and relabel.data_version == 3
    gold = c.send(created(annotation(2, 11, 2, "Neg", 4, gt=True), "r1", "ANNOTATION_UPDATED"))
    assert (gold.counts["gold_set"], gold.counts["deleted"]) == (1, 1)  # gold, no longer a vote
    gone = c.send(deleted(1))
    assert gone.counts["deleted"] == 1
    skipped = c.send(created(annotation(3, 12, 2, None, 5, cancelled=True), "r2"))
    empty = c.send(created(annotation(4, 12, 1, None, 5), "r2"))
    assert (skipped.counts["skipped_cancelled"], empty.counts["skipped_empty"]) == (1, 1)
    assert skipped.batch_id is None and empty.batch_id is None
    bulk = c.send({"action": "ANNOTATIONS_CREATED", "project": {"id": 7},
                   "annotation": [annotation(5, 12, 1, "Pos", 6), annotation(6, 13, 2, "Neg", 6)],
                   "task": [task(12, "r2"), task(13)]})  # task 13 has no item_id: the task id names it
    assert bulk.counts["inserted"] == 2 and bulk.counts["new_items"] == 2  # r2 (skips make no item) and 13

    state = c.state()
    assert state["votes"] == {("r2", "1"): "positive", ("13", "2"): "negative"}
    assert state["gold"] == {"r1": ("negative", "label-studio ground truth")}
    assert state["history"] == [("delete", "r1", "1", "negative"), ("delete", "r1", "2", "negative"),
                                ("relabel", "r1", "1", "positive")]
    assert state["data_version"] == 6 and state["outbox"] == [1, 2, 3, 4, 5, 6]

    # Deletions are history: the dataset as it was before them is still readable.
    before = load_snapshot(db_engine, c.dataset_id, data_version=3)
    r1 = before.items.index("r1")
    assert before.counts.counts[r1].tolist() == [2, 0]
    now = load_snapshot(db_engine, c.dataset_id)
    assert now.counts.counts[now.items.index("r1")].tolist() == [0, 0]
    assert now.gold[now.items.index("r1")] == 0


def test_retries_late_and_out_of_order_deliveries_never_count_twice(db_engine):
    c = Connector(db_engine)
    new, newer = annotation(1, 11, 1, "Pos", 1), annotation(1, 11, 1, "Neg", 2)
    c.send(created(newer, "r1", "ANNOTATION_UPDATED"))
    late = c.send(created(new, "r1"))  # the create arrives after its update
    assert late.status == "unchanged" and late.counts["duplicates"] == 1
    assert c.state()["votes"] == {("r1", "1"): "negative"}
    # A deletion arriving before the annotation's creation: the creation stays dead.
    first = c.send(deleted(9))
    assert first.counts["unknown_deleted"] == 1 and first.batch_id is None
    assert c.send(created(annotation(9, 12, 2, "Pos", 3), "r2")).status == "unchanged"
    assert c.send(deleted(9)).counts["duplicates"] == 1
    # The pull meeting what the webhook brought changes nothing; what it alone saw is applied.
    pulled = c.pull([(newer, "r1"), (annotation(10, 12, 2, "Pos", 4), "r2")])
    assert (pulled.counts["duplicates"], pulled.counts["inserted"]) == (1, 1)
    assert c.pull([(newer, "r1"), (annotation(10, 12, 2, "Pos", 4), "r2")]).status == "unchanged"
    assert c.state()["votes"] == {("r1", "1"): "negative", ("r2", "2"): "positive"}
    assert c.state()["history"] == []


def test_one_ground_truth_per_task_and_unmarking_it(db_engine):
    c = Connector(db_engine)
    c.send(created(annotation(1, 11, 1, "Pos", 1), "r1"))
    c.send(created(annotation(2, 11, 2, "Neg", 2), "r1"))
    c.send(created(annotation(1, 11, 1, "Pos", 3, gt=True), "r1", "ANNOTATION_UPDATED"))
    assert c.state()["gold"] == {"r1": ("positive", "label-studio ground truth")}
    # Label Studio unmarks the old ground truth without an event: its vote comes back.
    c.send(created(annotation(2, 11, 2, "Neg", 4, gt=True), "r1", "ANNOTATION_UPDATED"))
    state = c.state()
    assert state["gold"] == {"r1": ("negative", "label-studio ground truth")}
    assert state["votes"] == {("r1", "1"): "positive"}
    # Unmarked, it is a vote again and the item has no gold from Label Studio.
    c.send(created(annotation(2, 11, 2, "Neg", 5), "r1", "ANNOTATION_UPDATED"))
    state = c.state()
    assert state["gold"] == {} and state["votes"] == {("r1", "1"): "positive", ("r1", "2"): "negative"}
    assert c.send({"action": "TASKS_DELETED", "tasks": [{"id": 11}], "project": {"id": 7}}).counts["deleted"] == 2
    assert c.state()["votes"] == {}


def test_vendors_from_the_map_and_filled_in_once_the_email_is_known(db_engine):
    vendors = VendorMap.from_json({"domains": {"bolt.example.com": "bolt"}, "users": {"3": "acme"},
                                   "default": "in-house"})
    c = Connector(db_engine, vendor_map=vendors)
    out = c.send(created(annotation(1, 11, 1, "Pos", 1), "r1"))        # email unknown: vendor open
    assert out.unknown_users == {1}
    c.send(created(annotation(2, 11, {"id": 2, "email": "x@labs.bolt.example.com"}, "Pos", 1), "r1"))
    c.send(created(annotation(3, 11, 3, "Neg", 1), "r1"))             # mapped by id
    c.send(created(annotation(4, 12, {"id": 4, "email": "y@elsewhere.org"}, "Neg", 1), "r2"))
    refreshed = c.pull([], users={1: "z@bolt.example.com"}, refresh_vendors=True)
    assert refreshed.counts["vendors_set"] == 1
    with session_scope(c.factory) as s:
        got = dict(s.execute(select(Annotator.external_id, Annotator.vendor).where(
            Annotator.workspace_id == c.workspace_id)).all())
    assert {k.removeprefix(NS + "/"): v for k, v in got.items()} == {"1": "bolt", "2": "bolt", "3": "acme",
                                                                     "4": "in-house"}
    assert vendors.vendor(5, None) is None and VendorMap(default="crowd").vendor(5, None) == "crowd"


BAD = [
    (lambda e: e["annotation"]["result"][0]["value"].update(choices=["Maybe"]),
     "annotation.result[0].value.choices", "not one of the dataset's labels"),
    (lambda e: e["annotation"]["result"][0]["value"].update(choices=["Neg", "Pos"]),
     "annotation.result[0].value.choices", "exactly one choice"),
    (lambda e: e["annotation"].update(completed_by="someone"), "annotation.completed_by", "user id"),
    (lambda e: e["annotation"].update(completed_by={"email": "a@b.c"}), "annotation.completed_by.id", "user id"),
    (lambda e: e["annotation"].update(updated_at="yesterday", created_at=None), "annotation.updated_at", "ISO 8601"),
    (lambda e: e.update(project={"id": 8}), "project.id", "project 7"),
    (lambda e: e["annotation"].update(project=8), "annotation.project", "project 7"),
    (lambda e: e["task"]["data"].update(item_id=""), "task.data.item_id", "non-empty id"),
    (lambda e: e["task"]["data"].update(item_id="x" * 513), "task.data.item_id", "at most 512"),
    (lambda e: e.pop("annotation"), "annotation", "Send payload"),
    (lambda e: e["annotation"].update(id=True), "annotation.id", "integer id"),
    (lambda e: e["annotation"].update(was_cancelled="no"), "annotation.was_cancelled", "true or false"),
    (lambda e: e["annotation"].update(result="Pos"), "annotation.result", "list"),
]


@pytest.mark.parametrize(("spoil", "field", "reason"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_a_bad_event_names_its_field_and_writes_nothing(sqlite_engine, spoil, field, reason):
    c = Connector(sqlite_engine)
    event = created(annotation(1, 11, 1, "Pos", 1), "r1")
    spoil(event)
    with pytest.raises(PayloadRejected) as info:
        c.send(event)
    assert info.value.field == field and reason in str(info.value)
    assert c.state()["votes"] == {} and c.state()["data_version"] == 0


def test_one_bad_annotation_rejects_its_whole_bulk_event(sqlite_engine):
    c = Connector(sqlite_engine)
    anns = [annotation(i, 11, i, "Pos", 1) for i in range(1, 4)] + [annotation(4, 11, 4, "Perhaps", 1)]
    with pytest.raises(PayloadRejected) as info:
        c.send({"action": "ANNOTATIONS_CREATED", "annotation": anns, "task": [task(11, "r1")], "project": {"id": 7}})
    assert info.value.field == "annotation[3].result[0].value.choices"
    assert c.state()["votes"] == {}
    with pytest.raises(PayloadRejected, match="integer id"):
        c.send({"action": "ANNOTATIONS_DELETED", "annotations": [{"id": 1}, {"id": "two"}]})


# --- any order, any retries: the same dataset ------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["create", "update", "delete"]), st.integers(1, 4),
                         st.sampled_from(["Neg", "Pos"])), min_size=1, max_size=12)


def _events(ops) -> tuple[list[dict], dict]:
    """The events Label Studio sends for ``ops`` on four annotations (two users, two tasks),
    and what it then holds."""
    live: dict[int, dict] = {}
    dead: set[int] = set()
    events = []
    for t, (op, ls_id, choice) in enumerate(ops, 1):
        if ls_id in dead:
            continue
        if op == "delete":
            if ls_id in live:
                events.append(deleted(ls_id))
                del live[ls_id]
                dead.add(ls_id)
            continue
        if (op == "create") == (ls_id in live):
            continue
        ann = annotation(ls_id, 10 + (ls_id + 1) // 2, 1 + ls_id % 2, choice, t)
        live[ls_id] = ann
        events.append(created(ann, f"r{ann['task']}", "ANNOTATION_CREATED" if op == "create" else "ANNOTATION_UPDATED"))
    votes = {(f"r{a['task']}", str(a["completed_by"])): LABEL_MAP[a["result"][0]["value"]["choices"][0]]
             for a in live.values()}
    return events, votes


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(ops=OPS, order=st.randoms(use_true_random=False), repeats=st.lists(st.integers(0, 30), max_size=6))
def test_any_delivery_order_with_retries_gives_label_studios_state(sqlite_engine, ops, order, repeats):
    events, votes = _events(ops)
    if not events:
        return
    delivered = events + [copy.deepcopy(events[i % len(events)]) for i in repeats]
    order.shuffle(delivered)
    c = Connector(sqlite_engine)
    for event in delivered:
        c.send(event)
    assert c.state()["votes"] == votes
    # A pull of what Label Studio holds afterwards finds nothing to change.
    live = [(e["annotation"], e["task"]["data"]["item_id"]) for e in events if "annotation" in e]
    latest = {}
    for ann, item in live:
        latest[ann["id"]] = (ann, item)
    gone = {a["id"] for e in events if e["action"] == "ANNOTATIONS_DELETED" for a in e["annotations"]}
    assert c.pull([v for k, v in latest.items() if k not in gone]).batch_id is None


# --- the endpoint -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(pg_engine):
    from tests.web.conftest import _require_redis, app_config

    _require_redis()
    from auditor.web import create_app

    app = create_app(app_config(pg_engine))
    yield app
    app.extensions["auditor.engine"].dispose()


def test_the_endpoint_authenticates_bounds_and_answers_json(web, pg_engine):
    c = Connector(pg_engine)
    client = web.test_client()
    url = f"/hooks/label-studio/{c.id}"
    event = created(annotation(1, 11, 1, "Pos", 1), "r1")
    ok = {"X-Auditor-Webhook-Secret": c.secret}
    for headers in ({}, {"X-Auditor-Webhook-Secret": "lsw_" + "x" * 43}, {"X-Auditor-Webhook-Secret": ""}):
        r = client.post(url, json=event, headers=headers)
        assert r.status_code == 401 and r.get_json()["field"] == "X-Auditor-Webhook-Secret"
    assert client.post("/hooks/label-studio/999999", json=event, headers=ok).status_code == 401
    assert client.post("/hooks/label-studio/99999999999", json=event, headers=ok).status_code == 401

    r = client.post(url, json=event, headers=ok)
    assert r.status_code == 200 and r.get_json()["inserted"] == 1 and r.get_json()["status"] == "changed"
    r = client.post(url, json=event, headers=ok)
    assert r.status_code == 200 and r.get_json()["status"] == "unchanged" and r.get_json()["duplicates"] == 1
    r = client.post(url, json={"action": "PROJECT_UPDATED", "project": {"id": 7}}, headers=ok)
    assert r.status_code == 200 and r.get_json()["status"] == "ignored"

    r = client.post(url, data=b"{not json", headers=ok | {"Content-Type": "application/json"})
    assert r.status_code == 400 and r.get_json()["field"] == "body"
    bad = created(annotation(2, 11, 2, "Maybe", 2), "r1")
    r = client.post(url, json=bad, headers=ok)
    body = r.get_json()
    assert r.status_code == 422 and body["field"] == "annotation.result[0].value.choices"
    assert body["errors"][0]["message"].startswith("'Maybe' is not one of")
    nul = created(annotation(2, 11, 2, "Pos", 2), "r1\x00")
    r = client.post(url, json=nul, headers=ok)
    assert r.status_code == 400 and r.get_json()["field"] == "task.data.item_id"
    many = {"action": "ANNOTATIONS_DELETED", "annotations": [{"id": i} for i in range(1, MAX_EVENT_ANNOTATIONS + 2)]}
    r = client.post(url, json=many, headers=ok)
    assert r.status_code == 413 and r.get_json()["field"] == "annotations"
    huge = json.dumps(event).encode() + b" " * (16 << 20)
    r = client.post(url, data=huge, headers=ok | {"Content-Type": "application/json"})
    assert r.status_code == 413
    with session_scope(c.factory) as s:
        assert s.scalar(select(Dataset.data_version).where(Dataset.id == c.dataset_id)) == 1
    with session_scope(c.factory) as s:
        s.get(LabelStudioConnector, c.id).enabled = False
    assert client.post(url, json=event, headers=ok).status_code == 409
