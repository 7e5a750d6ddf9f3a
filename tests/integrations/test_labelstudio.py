"""Label Studio, live, against a real Label Studio server (see
:mod:`tests.integrations.labelstudio_server`), a real Auditor web process (gunicorn), real
PostgreSQL, Redis and a Celery worker.

Two users annotate through the SDK; Label Studio's webhooks reach Auditor as they would in
production; one annotation is made ground truth, one updated, one deleted, one skipped;
Auditor's dataset then holds exactly Label Studio's annotations, gold and history, and an
audit ran. Then Auditor's web process is killed while annotating goes on, restarted, and
the pull sync catches up: nothing missing, nothing doubled. The beat task does the same
by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from auditor.db import session_scope
from auditor.db.models import (
    Annotation,
    AnnotationHistory,
    Annotator,
    AuditRun,
    AuditStatus,
    Dataset,
    Item,
    LabelStudioAnnotation,
    LabelStudioConnector,
    LabelStudioEvent,
    Workspace,
)
from bench._scratch import stop_processes
from tests.integrations.labelstudio_server import free_port, label_studio  # noqa: F401 (fixture)
from tests.workers._data import make_dataset, workspace_of
from tests.workers.conftest import pg_factory, redis_url, start_worker, worker_env  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.services,
              # label-studio-sdk still uses pydantic's v1 validators: not ours to fix.
              pytest.mark.filterwarnings("ignore::DeprecationWarning:label_studio_sdk.*")]

CLI = "from auditor.cli import main; main()"
LABELS = ["negative", "positive"]
CHOICES = {"Neg": "negative", "Pos": "positive"}
LABEL_CONFIG = ('<View><Text name="text" value="$text"/><Choices name="sentiment" toName="text" choice="single">'
                '<Choice value="Neg"/><Choice value="Pos"/></Choices></View>')
HEADER = "X-Auditor-Webhook-Secret"
ACTIONS = ["ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED", "TASKS_DELETED"]
VENDORS = {"labelers.example.org": "acme-labeling", "bolt.example.com": "bolt"}


def wait_for(predicate: Callable[[], object], timeout: float, what: str, logs: Callable[[], str] = lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs()}")


class AuditorWeb:
    """``auditor serve`` (gunicorn) in a process group of its own, on a fixed free port."""

    def __init__(self, env: dict[str, str], log: Path):
        self.env, self.log_path, self.port = env, log, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--host", "127.0.0.1", "--port",
                                      str(self.port), "--workers", "1", "--threads", "4"],
                                     env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

        def up() -> bool:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/api/v1/openapi.json", timeout=2) as resp:
                    return resp.status == 200
            return False

        wait_for(up, 60, "the Auditor web process", self.output)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill: no request finishes, nothing is flushed."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        stop_processes(self.proc, timeout=15)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


@pytest.fixture
def stack(pg_factory, redis_url, start_worker, tmp_path):  # noqa: F811
    """PostgreSQL, a Celery worker and an Auditor web process sharing one environment."""
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_SECRET_KEY="ls-test-" + uuid.uuid4().hex,
                     AUDITOR_CONNECTOR_ALLOW_PRIVATE="true",  # the Label Studio here listens on 127.0.0.1
                     AUDITOR_LABELSTUDIO_SYNC_SECONDS="3600", AUDITOR_INGEST_LIMIT="1000 per minute")
    worker = start_worker(env)
    web = AuditorWeb(env, tmp_path / "web.log")
    web.start()
    yield env, factory, web, worker
    web.stop()


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"auditor {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def new_project(ls, title: str, items: list[str]) -> tuple[int, dict[str, int]]:
    project = ls.projects.create(title=title, label_config=LABEL_CONFIG)
    ls.projects.import_tasks(id=project.id, request=[{"data": {"text": f"review {i}", "item_id": i}} for i in items])
    tasks = {t.data["item_id"]: t.id for t in ls.tasks.list(project=project.id, page_size=100)}
    assert sorted(tasks) == sorted(items)
    return project.id, tasks


def choice(value: str) -> list[dict]:
    return [{"from_name": "sentiment", "to_name": "text", "type": "choices", "value": {"choices": [value]}}]


def truth(ls, project_id: int, namespace: str) -> tuple[dict, dict, set[int]]:
    """What Label Studio holds: votes {(item, annotator): label}, gold {item: label}, and the
    ids of those annotations."""
    votes, gold, ids = {}, {}, set()
    for task in ls.tasks.list(project=project_id, fields="all", page_size=100):
        for a in task.annotations or []:
            a = a if isinstance(a, dict) else a.model_dump()
            if a.get("was_cancelled") or not a.get("result"):
                continue
            ids.add(a["id"])
            label = CHOICES[a["result"][0]["value"]["choices"][0]]
            user = a["completed_by"]["id"] if isinstance(a["completed_by"], dict) else a["completed_by"]
            if a.get("ground_truth"):
                gold[task.data["item_id"]] = label
            else:
                votes[(task.data["item_id"], f"{namespace}/{user}")] = label
    return votes, gold, ids


def dataset_state(factory, dataset_id: int) -> dict:
    """Auditor's side: votes, gold, history, vendors, and per-item counts checked against the rows.

    Read in one snapshot (REPEATABLE READ): a sync committing between two statements of a
    READ COMMITTED transaction would show the items' counts of one state and the rows of another."""
    with session_scope(factory) as s:
        s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        labels = list(s.get(Dataset, dataset_id).labels)
        rows = s.execute(select(Item.external_id, Annotator.external_id, Annotation.label)
                         .join(Item, Item.id == Annotation.item_id).join(Annotator, Annotator.id == Annotation.annotator_id)
                         .where(Annotation.dataset_id == dataset_id)).all()
        votes = {(i, a): labels[c] for i, a, c in rows}
        assert len(votes) == len(rows)
        gold = {i: labels[g] for i, g in s.execute(select(Item.external_id, Item.gold_label).where(
            Item.dataset_id == dataset_id, Item.gold_label.is_not(None)))}
        history = sorted((h, i, a, labels[c]) for h, i, a, c in s.execute(
            select(AnnotationHistory.change, Item.external_id, Annotator.external_id, AnnotationHistory.label)
            .join(Item, Item.id == AnnotationHistory.item_id)
            .join(Annotator, Annotator.id == AnnotationHistory.annotator_id)
            .where(AnnotationHistory.dataset_id == dataset_id)))
        per_item = Counter((i, c) for i, _, c in rows)
        for ext, counts in s.execute(select(Item.external_id, Item.label_counts).where(Item.dataset_id == dataset_id)):
            assert list(counts or [0, 0]) == [per_item[(ext, c)] for c in range(len(labels))], ext
        vendors = dict(s.execute(select(Annotator.external_id, Annotator.vendor).where(
            Annotator.external_id.in_({a for _, a, _ in rows}))).all())
        version = s.get(Dataset, dataset_id).data_version
    return {"votes": votes, "gold": gold, "history": history, "vendors": vendors, "data_version": version}


def audited(factory, dataset_id: int, version: int) -> bool:
    with session_scope(factory) as s:
        return s.scalar(select(func.count()).select_from(AuditRun).where(
            AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.SUCCEEDED,
            AuditRun.data_version == version)) > 0


def post(url: str, body: dict, secret: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} | ({HEADER: secret} if secret else {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def connect(env, ls_url, project_id, dataset, workspace, *extra: str) -> tuple[int, str | None, str]:
    out = cli(env, "connect", "label-studio", "--url", ls_url, "--project", str(project_id), "--dataset", dataset,
              "--workspace", workspace, "--label", "Neg=negative", "--label", "Pos=positive",
              *[f"--vendor-domain={d}={v}" for d, v in VENDORS.items()], *extra)
    connector = int(re.search(r"^connector (\d+):", out, re.M).group(1))
    secret = re.search(rf"{HEADER}: (\S+)", out)
    return connector, secret.group(1) if secret else None, out


def test_webhooks_then_an_outage_caught_up_by_the_pull_sync(label_studio, stack):  # noqa: F811
    env, factory, web, worker = stack
    admin, rater = label_studio.client(label_studio.admin_token), label_studio.client(label_studio.annotator_token)
    admin_id, rater_id = admin.users.whoami().id, rater.users.whoami().id
    ns = label_studio.url.removeprefix("http://")
    A, R = f"{ns}/{admin_id}", f"{ns}/{rater_id}"
    items = [f"r{i}" for i in range(1, 13)]
    project_id, tasks = new_project(admin, f"reviews {uuid.uuid4().hex[:6]}", items)
    name = f"ls-{uuid.uuid4().hex[:6]}"
    dataset_id = make_dataset(factory, name, LABELS)
    workspace = workspace_of(factory, dataset_id)

    # Connect: checks the project's choices against the dataset, stores the token
    # encrypted, backfills (nothing yet), and prints the webhook's secret once.
    connector, secret, out = connect(env, label_studio.url, project_id, name, workspace, "--token",
                                     label_studio.admin_token)
    assert secret and "synced: 12 task(s), 0 annotation(s) read" in out, out
    hook = f"{web.url}/hooks/label-studio/{connector}"
    admin.webhooks.create(url=hook, project=project_id, headers={HEADER: secret}, send_payload=True,
                          send_for_all_actions=False, actions=ACTIONS)

    # Two users annotate; Label Studio posts each event to Auditor before it answers.
    mine = {i: admin.annotations.create(id=tasks[i], result=choice(c)).id
            for i, c in [("r1", "Pos"), ("r2", "Pos"), ("r3", "Neg"), ("r4", "Pos")]}
    theirs = {i: rater.annotations.create(id=tasks[i], result=choice(c)).id
              for i, c in [("r1", "Pos"), ("r2", "Pos"), ("r3", "Neg"), ("r5", "Neg")]}
    rater.annotations.create(id=tasks["r6"], result=[], was_cancelled=True)  # skipped, counted
    # A user Auditor has not met: its email, hence its vendor, comes with the sync the
    # webhook receiver asks the worker for.
    newbie = admin.users.create(email=f"new-{uuid.uuid4().hex[:6]}@bolt.example.com", username="newbie").id
    N = f"{ns}/{newbie}"
    admin.annotations.create(id=tasks["r6"], result=choice("Pos"), completed_by=newbie)
    admin.annotations.update(id=mine["r4"], ground_truth=True)                # gold, no longer a vote
    rater.annotations.update(id=theirs["r2"], result=choice("Neg"))           # a re-label
    admin.annotations.delete(id=mine["r3"])                                  # a deletion

    votes, gold, _ = truth(admin, project_id, ns)
    state = wait_for(lambda: (st := dataset_state(factory, dataset_id))["vendors"].get(N) and st, 120,
                     "the sync that learns the new user's email", worker.output)
    assert state["votes"] == votes == {("r1", A): "positive", ("r2", A): "positive", ("r1", R): "positive",
                                       ("r2", R): "negative", ("r3", R): "negative", ("r5", R): "negative",
                                       ("r6", N): "positive"}
    assert state["gold"] == gold == {"r4": "positive"}
    assert state["history"] == [("delete", "r3", A, "negative"), ("delete", "r4", A, "positive"),
                                ("relabel", "r2", R, "positive")]
    assert state["vendors"] == {A: "acme-labeling", R: "bolt", N: "bolt"}
    with session_scope(factory) as s:
        events = s.execute(select(LabelStudioEvent.action, LabelStudioEvent.status, LabelStudioEvent.counts)
                           .where(LabelStudioEvent.connector_id == connector, LabelStudioEvent.source == "webhook")
                           .order_by(LabelStudioEvent.id)).all()
    assert [e.action for e in events] == ["ANNOTATION_CREATED"] * 10 + ["ANNOTATION_UPDATED"] * 2 + \
        ["ANNOTATIONS_DELETED"]
    assert events[8].status == "unchanged" and events[8].counts["skipped_cancelled"] == 1
    assert all(e.status == "changed" for i, e in enumerate(events) if i != 8)
    wait_for(lambda: audited(factory, dataset_id, state["data_version"]), 120,
             f"an audit of data_version {state['data_version']}", worker.output)

    # Label Studio's retry of an event changes nothing; a wrong secret and a bad payload are
    # refused, naming what is wrong, and write nothing.
    task = admin.tasks.get(id=tasks["r5"])
    ann = admin.annotations.get(id=theirs["r5"]).model_dump(mode="json")
    event = {"action": "ANNOTATION_CREATED", "annotation": ann, "project": {"id": project_id},
             "task": {"id": task.id, "data": task.data, "project": project_id}}
    status, body = post(hook, event, secret)
    assert (status, body["status"], body["duplicates"]) == (200, "unchanged", 1), body
    assert post(hook, event, "lsw_wrong")[0] == 401
    bad = json.loads(json.dumps(event))
    bad["annotation"]["result"][0]["value"]["choices"] = ["Maybe"]
    bad["annotation"]["updated_at"] = "2099-01-01T00:00:00Z"
    status, body = post(hook, bad, secret)
    assert status == 422 and body["field"] == "annotation.result[0].value.choices", body
    assert dataset_state(factory, dataset_id) == state

    # Annotating goes on while Auditor's web process is killed mid-stream; events sent
    # meanwhile are lost (Label Studio logs them and moves on).
    created: list[tuple[str, str, int]] = []

    def annotate() -> None:
        for k, item in enumerate(items[6:]):
            who, client = ("admin", admin) if k % 2 == 0 else ("rater", rater)
            created.append((item, who, client.annotations.create(id=tasks[item], result=choice("Pos" if k % 3 else "Neg")).id))
            rater_too = rater.annotations.create(id=tasks[item], result=choice("Neg")).id if who == "admin" else None
            if rater_too:
                created.append((item, "rater", rater_too))
            time.sleep(0.3)

    stream = threading.Thread(target=annotate)
    stream.start()
    wait_for(lambda: len(created) >= 3, 60, "the first annotations of the stream")
    web.kill()
    stream.join(120)
    assert not stream.is_alive() and len(created) == 9
    admin.annotations.update(id=mine["r1"], result=choice("Neg"))    # a re-label nobody hears of
    rater.annotations.delete(id=theirs["r5"])                        # a deletion nobody hears of
    admin.annotations.update(id=next(a for i, who, a in created if who == "rater" and i == "r8"), ground_truth=True)
    lost = dataset_state(factory, dataset_id)
    assert lost["votes"] != truth(admin, project_id, ns)[0]

    web.start()
    admin.annotations.create(id=tasks["r5"], result=choice("Pos"))  # heard again at once
    out = cli(env, "connect", "label-studio", "--url", label_studio.url, "--project", str(project_id),
              "--dataset", name, "--workspace", workspace)  # the pull sync, with the stored token
    # What the webhooks missed: the stream's annotations after the kill, a re-label, a
    # deletion, and a vote made ground truth (gold, and its vote withdrawn).
    caught = re.search(r"(\d+) new, (\d+) re-labelled, (\d+) deleted, (\d+) gold change", out)
    assert caught, out
    new, relabeled, deleted, gold_changes = map(int, caught.groups())
    assert new >= 1 and (relabeled, deleted, gold_changes) == (1, 2, 1), out

    votes, gold, ids = truth(admin, project_id, ns)
    state = dataset_state(factory, dataset_id)
    assert state["votes"] == votes and state["gold"] == gold
    assert len(votes) == 7 + 9 + 1 - 1 - 1  # before + stream + after restart - deleted - made gold
    assert ("relabel", "r1", A, "positive") in state["history"]
    assert ("delete", "r5", R, "negative") in state["history"]
    assert ("delete", "r8", R, "positive") in state["history"]      # the vote that became gold
    assert len(state["history"]) == 3 + 3
    assert set(state["vendors"].values()) == {"acme-labeling", "bolt"}
    with session_scope(factory) as s:
        mirror = dict(s.execute(select(LabelStudioAnnotation.ls_id, LabelStudioAnnotation.state).where(
            LabelStudioAnnotation.connector_id == connector)).all())
    assert {i for i, st in mirror.items() if st in ("vote", "gold")} == ids  # every live annotation, once
    assert {i for i, st in mirror.items() if st == "deleted"} == {mine["r3"], theirs["r5"]}

    # A second pull finds nothing new, and the last version is audited.
    out = cli(env, "connect", "label-studio", "--url", label_studio.url, "--project", str(project_id),
              "--dataset", name, "--workspace", workspace)
    assert "nothing changed" in out and "0 new, 0 re-labelled, 0 deleted" in out, out
    assert dataset_state(factory, dataset_id) == state
    wait_for(lambda: audited(factory, dataset_id, state["data_version"]), 120,
             f"an audit of data_version {state['data_version']}", worker.output)


def test_the_beat_task_catches_up_without_webhooks(label_studio, pg_factory, redis_url, start_worker,  # noqa: F811
                                                   tmp_path):
    """The webhook registered by ``--register-webhook`` points at an Auditor that is not
    running; the worker's beat task pulls the project by itself."""
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_SECRET_KEY="ls-test-" + uuid.uuid4().hex,
                     AUDITOR_CONNECTOR_ALLOW_PRIVATE="true",  # the Label Studio here listens on 127.0.0.1
                     AUDITOR_LABELSTUDIO_SYNC_SECONDS="2")
    admin, rater = label_studio.client(label_studio.admin_token), label_studio.client(label_studio.annotator_token)
    ns = label_studio.url.removeprefix("http://")
    project_id, tasks = new_project(admin, f"beat {uuid.uuid4().hex[:6]}", ["b1", "b2", "b3"])
    name = f"ls-beat-{uuid.uuid4().hex[:6]}"
    dataset_id = make_dataset(factory, name, LABELS)
    workspace = workspace_of(factory, dataset_id)
    down = f"http://127.0.0.1:{free_port()}"
    # The project's choices are not the dataset's labels: refused, naming them, nothing stored.
    refused = subprocess.run([sys.executable, "-c", CLI, "connect", "label-studio", "--url", label_studio.url,
                              "--project", str(project_id), "--dataset", name, "--workspace", workspace,
                              "--token", label_studio.admin_token], env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 1 and "the choices 'Neg', 'Pos' of control 'sentiment'" in refused.stderr \
        and "--label CHOICE=LABEL" in refused.stderr, refused.stderr
    with session_scope(factory) as s:
        assert s.scalar(select(func.count()).select_from(LabelStudioConnector)) == 0
    connector, secret, out = connect(env, label_studio.url, project_id, name, workspace, "--no-sync")
    assert "not checked against Label Studio" in out
    # Registering the webhook talks to Label Studio, so it needs the token (here from the environment).
    _, secret, out = connect({**env, "LABEL_STUDIO_API_KEY": label_studio.admin_token}, label_studio.url,
                             project_id, name, workspace, "--rotate-secret", "--register-webhook", down)
    hooks = [h for h in admin.webhooks.list(project=project_id) if h.url == f"{down}/hooks/label-studio/{connector}"]
    assert len(hooks) == 1 and hooks[0].headers == {HEADER: secret} and set(hooks[0].actions) == set(ACTIONS)

    admin.annotations.create(id=tasks["b1"], result=choice("Pos"))
    rater.annotations.create(id=tasks["b1"], result=choice("Neg"))
    gt = rater.annotations.create(id=tasks["b2"], result=choice("Neg")).id
    admin.annotations.update(id=gt, ground_truth=True)
    worker = start_worker({**env, "LABEL_STUDIO_API_KEY": label_studio.admin_token})
    votes, gold, _ = truth(admin, project_id, ns)
    state = wait_for(lambda: (st := dataset_state(factory, dataset_id))["votes"] == votes and st["gold"] == gold
                     and st, 120, "the beat task's sync", worker.output)
    assert state["vendors"] == {f"{ns}/{admin.users.whoami().id}": "acme-labeling",
                                f"{ns}/{rater.users.whoami().id}": "bolt"}
    wait_for(lambda: audited(factory, dataset_id, state["data_version"]), 120, "the audit", worker.output)


def _reader(factory, workspace: str) -> tuple[str, str, str]:
    """An admin of ``workspace``: (email, password, API token)."""
    from auditor.db import Role, User
    from auditor.web.security import hash_password, issue_token

    email, password = f"feeds-{uuid.uuid4().hex[:6]}@auditor.example", "correct horse battery"
    with session_scope(factory) as s:
        ws = s.scalar(select(Workspace).where(Workspace.slug == workspace))
        user = User(workspace_id=ws.id, email=email, role=Role.ADMIN, password_hash=hash_password(password))
        s.add(user)
        s.flush()
        token = issue_token(s, user, name="feeds")[1]
    return email, password, token


def _feed_over_http(web, dataset_id: int, connector: int, token: str) -> dict:
    req = urllib.request.Request(f"{web.url}/api/v1/datasets/{dataset_id}/feeds",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        items = json.loads(resp.read())["items"]
    return next(f for f in items if f["kind"] == "labelstudio" and f["id"] == connector)


def _page_over_http(web, workspace: str, email: str, password: str, dataset_id: int) -> str:
    import http.cookiejar
    import urllib.parse

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with opener.open(f"{web.url}/login", timeout=30) as resp:
        token = re.search(r'name="csrf_token" value="([^"]+)"', resp.read().decode()).group(1)
    form = urllib.parse.urlencode({"csrf_token": token, "workspace": workspace, "email": email,
                                   "password": password}).encode()
    opener.open(f"{web.url}/login", data=form, timeout=30).close()
    with opener.open(f"{web.url}/datasets/{dataset_id}", timeout=30) as resp:
        return resp.read().decode()


def test_bad_annotations_are_quarantined_and_the_rest_syncs(label_studio, stack):  # noqa: F811
    """Label Studio takes a choice outside its labeling config and a result with two choices;
    an import makes two ground truths on one task. The pull syncs every good annotation,
    keeps the two bad ones aside (listed in the API and on the page, with the fix), follows
    the ground-truth rule, and takes the fixed annotation on the next sync. A webhook
    refused meanwhile turns the feed from ok, in the API and on the page."""
    env, factory, web, _worker = stack
    admin, rater = label_studio.client(label_studio.admin_token), label_studio.client(label_studio.annotator_token)
    ns = label_studio.url.removeprefix("http://")
    A, R = f"{ns}/{admin.users.whoami().id}", f"{ns}/{rater.users.whoami().id}"
    project_id, tasks = new_project(admin, f"quarantine {uuid.uuid4().hex[:6]}", ["q1", "q2", "q3", "q4"])
    name = f"ls-q-{uuid.uuid4().hex[:6]}"
    dataset_id = make_dataset(factory, name, LABELS)
    workspace = workspace_of(factory, dataset_id)
    connector, secret, _ = connect(env, label_studio.url, project_id, name, workspace, "--token",
                                   label_studio.admin_token)

    admin.annotations.create(id=tasks["q1"], result=choice("Pos"))
    rater.annotations.create(id=tasks["q1"], result=choice("Neg"))
    admin.annotations.create(id=tasks["q2"], result=choice("Neg"))
    gone = rater.annotations.create(id=tasks["q4"], result=choice("Pos")).id
    maybe = rater.annotations.create(id=tasks["q2"], result=choice("Maybe")).id           # accepted by Label Studio
    two = rater.annotations.create(id=tasks["q3"], result=[{**choice("Pos")[0], "value": {"choices": ["Pos", "Neg"]}}]).id
    # An import makes each of its annotations a ground truth: two on one task.
    admin.projects.import_tasks(id=project_id, request=[{"data": {"text": "review q5", "item_id": "q5"},
                                                         "annotations": [{"result": choice("Pos")},
                                                                         {"result": choice("Neg")}]}])
    q5 = next(t for t in admin.tasks.list(project=project_id, fields="all", page_size=100) if t.data["item_id"] == "q5")
    truths = [a if isinstance(a, dict) else a.model_dump() for a in q5.annotations]
    assert len(truths) == 2 and all(a["ground_truth"] for a in truths)
    winner = max(truths, key=lambda a: (a["updated_at"], a["id"]))
    expected_gold = CHOICES[winner["result"][0]["value"]["choices"][0]]

    sync = [sys.executable, "-c", CLI, "connect", "label-studio", "--url", label_studio.url, "--project",
            str(project_id), "--dataset", name, "--workspace", workspace]
    done = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # one bad annotation no longer stops the sync
    assert "2 annotation(s) quarantined" in done.stdout and "1 ground truth(s) ignored" in done.stdout, done.stdout
    assert f"task {tasks['q2']} annotation {maybe}: " in done.stderr and "'Maybe'" in done.stderr, done.stderr
    state = dataset_state(factory, dataset_id)
    assert state["votes"] == {("q1", A): "positive", ("q1", R): "negative", ("q2", A): "negative",
                              ("q4", R): "positive"}
    # The ground truth updated last is the gold label; the other is neither gold nor a vote.
    assert state["gold"] == {"q5": expected_gold}

    email, password, token = _reader(factory, workspace)
    feed = _feed_over_http(web, dataset_id, connector, token)
    assert feed["quarantined"] == 2 and feed["state"] == "ok"
    listed = {q["annotation_id"]: q for q in feed["quarantine"]}
    assert set(listed) == {maybe, two}
    assert listed[maybe]["task_id"] == tasks["q2"] and listed[maybe]["field"].endswith("result[0].value.choices")
    assert "'Maybe' is not one of the dataset's labels" in listed[maybe]["reason"]
    assert "--label" in listed[maybe]["hint"]
    assert "expected exactly one choice" in listed[two]["reason"] and "exactly one" in listed[two]["hint"]
    page = _page_over_http(web, workspace, email, password, dataset_id)
    assert f'data-annotation="{maybe}"' in page and f'data-annotation="{two}"' in page and "2 quarantined" in page

    # Fixed (and the other deleted) in Label Studio, one more deleted: the next sync takes the
    # fix, empties the quarantine and still detects deletions.
    rater.annotations.update(id=maybe, result=choice("Pos"))
    rater.annotations.delete(id=two)
    rater.annotations.delete(id=gone)
    done = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "quarantined" not in done.stdout, done.stdout
    state = dataset_state(factory, dataset_id)
    assert state["votes"] == {("q1", A): "positive", ("q1", R): "negative", ("q2", A): "negative",
                              ("q2", R): "positive"}
    assert ("delete", "q4", R, "positive") in state["history"]
    feed = _feed_over_http(web, dataset_id, connector, token)
    assert feed["quarantined"] == 0 and feed["quarantine"] == [] and feed["state"] == "ok"

    # A webhook refused (Label Studio sends the bad choice, Auditor answers 422): counted, not "ok".
    admin.webhooks.create(url=f"{web.url}/hooks/label-studio/{connector}", project=project_id,
                          headers={HEADER: secret}, send_payload=True, send_for_all_actions=False, actions=ACTIONS)
    rater.annotations.update(id=maybe, result=choice("Maybe"))
    feed = wait_for(lambda: (f := _feed_over_http(web, dataset_id, connector, token))["webhook_refused"] and f, 60,
                    "the refused webhook", web.output)
    assert feed["webhook_refused"] == 1 and feed["state"] == "error" and feed["last_refusal"].startswith("HTTP 422")
    assert "webhook deliveries refused" in feed["error"]
    page = _page_over_http(web, workspace, email, password, dataset_id)
    assert "1 webhook(s) refused" in page
