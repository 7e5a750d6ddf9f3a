"""Models and their releases."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from auditor.db import (
    Model,
    Release,
)
from auditor.web.api import serializers as s
from auditor.web.api.common import WRITERS, B, commit, get_model, get_release
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.errors import ApiError
from auditor.web.security import READERS

__all__: list[str] = []  # the operations register themselves with the route table


# --- models and releases ----------------------------------------------------------------------


@endpoint("GET", "/models", summary="List models", tag="models", roles=READERS, listing=True,
          query=[Param("name", "string", "Only models whose name contains this text.", max_length=200)],
          response=s.page_of("Model"))
def list_models(principal, db, name):
    """Models of the workspace."""
    stmt = select(Model).where(Model.workspace_id == principal.workspace_id).order_by(Model.name)
    if name:
        stmt = stmt.where(Model.name.contains(name, autoescape=True))
    return Listing(stmt, s.model, ["id", "name", "description", "created_at"], "models")


@endpoint("POST", "/models", summary="Create a model", tag="models", roles=WRITERS, body=B["ModelCreate"],
          body_name="ModelCreate", response=s.ref("Model"), status=201)
def create_model(principal, db, body):
    """A model family."""
    m = Model(workspace_id=principal.workspace_id, name=body["name"], description=body.get("description"))
    db.add(m)
    commit(db, f"A model named {body['name']!r}")
    return s.model(m)


@endpoint("GET", "/models/<int:model_id>", summary="Read a model", tag="models", roles=READERS,
          response=s.ref("Model"))
def read_model(principal, db, model_id):
    """One model."""
    return s.model(get_model(principal, db, model_id))


@endpoint("GET", "/models/<int:model_id>/releases", summary="List releases", tag="models", roles=READERS,
          listing=True, response=s.page_of("Release"))
def list_releases(principal, db, model_id):
    """Releases of a model, oldest first."""
    m = get_model(principal, db, model_id)
    stmt = (select(Release).where(Release.model_id == m.id)
            .order_by(Release.released_at.asc().nulls_last(), Release.id))
    return Listing(stmt, s.release, ["id", "version", "alias", "released_at", "tags", "created_at"],
                   f"releases-{m.id}")


@endpoint("POST", "/models/<int:model_id>/releases", summary="Create a release", tag="models", roles=WRITERS,
          body=B["ReleaseCreate"], body_name="ReleaseCreate", response=s.ref("Release"), status=201)
def create_release(principal, db, model_id, body):
    """A release (version) of a model."""
    m = get_model(principal, db, model_id)
    released_at = None
    if body.get("released_at"):
        try:
            released_at = datetime.fromisoformat(body["released_at"])
        except ValueError:
            raise ApiError(400, "released_at must be an ISO 8601 date-time.", field="released_at") from None
        if released_at.tzinfo is None:
            raise ApiError(400, "released_at must include a time zone (e.g. 'Z').", field="released_at")
    r = Release(model_id=m.id, version=body["version"], alias=body.get("alias"), tags=body.get("tags"),
                released_at=released_at)
    db.add(r)
    commit(db, f"A release {body['version']!r} of this model")
    return s.release(r)


@endpoint("GET", "/releases/<int:release_id>", summary="Read a release", tag="models", roles=READERS,
          response=s.ref("Release"))
def read_release(principal, db, release_id):
    """One release."""
    return s.release(get_release(principal, db, release_id))
