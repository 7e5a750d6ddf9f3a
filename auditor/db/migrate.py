"""Running the Alembic migrations from Python (``auditor db upgrade`` and the tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

__all__ = ["alembic_config", "downgrade", "heads", "upgrade"]

#: The Alembic scripts: inside the installed package (the build copies the top-level
#: ``migrations/`` there), else, in a source checkout or an editable install, that folder.
_PACKAGED = Path(__file__).resolve().parents[1] / "_migrations"
SCRIPTS = _PACKAGED if (_PACKAGED / "env.py").is_file() else Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(engine: Engine | None = None, *, url: str | None = None) -> Config:
    """Auditor's Alembic config, pointed at ``engine`` (or ``url``, or the settings)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    # Library callers keep their own logging configuration.
    cfg.attributes["configure_logging"] = False
    if engine is not None:
        url = engine.url.render_as_string(hide_password=False)
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _run(engine: Engine | None, url: str | None, fn, *args) -> None:
    cfg = alembic_config(url=url)
    if engine is None:
        fn(cfg, *args)
        return
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        fn(cfg, *args)


def upgrade(engine: Engine | None = None, revision: str = "head", *, url: str | None = None) -> None:
    """Migrate the database up to ``revision``."""
    _run(engine, url, command.upgrade, revision)


def downgrade(engine: Engine | None = None, revision: str = "base", *, url: str | None = None) -> None:
    """Migrate the database down to ``revision`` (default: empty)."""
    _run(engine, url, command.downgrade, revision)


def heads() -> tuple[str, ...]:
    """The head revisions of the migration scripts (one, unless someone branched)."""
    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())
