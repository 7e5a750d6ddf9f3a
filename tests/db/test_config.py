"""Settings come from the environment when asked for, never at import; URLs pick psycopg 3."""

from __future__ import annotations

import importlib

import pytest

import auditor.config
from auditor.config import load_settings
from auditor.db import make_engine, normalize_url


def test_defaults_are_a_sqlite_file_under_the_instance_folder(tmp_path):
    settings = load_settings({"AUDITOR_INSTANCE_PATH": str(tmp_path / "inst")})
    assert settings.is_sqlite
    assert settings.database_url == f"sqlite:///{(tmp_path / 'inst' / 'auditor.sqlite3').resolve()}"
    assert settings.broker_url.startswith("sqla+sqlite:///") and settings.max_upload_bytes == 1 << 30


def test_environment_is_read_when_called_not_at_import(monkeypatch):
    importlib.reload(auditor.config)
    monkeypatch.setenv("AUDITOR_DATABASE_URL", "postgresql://u@db.example/auditor")
    monkeypatch.setenv("AUDITOR_MAX_UPLOAD_BYTES", "1024")
    settings = auditor.config.load_settings()
    assert settings.database_url == "postgresql://u@db.example/auditor" and settings.max_upload_bytes == 1024
    monkeypatch.setenv("AUDITOR_MAX_UPLOAD_BYTES", "lots")
    with pytest.raises(ValueError, match="AUDITOR_MAX_UPLOAD_BYTES"):
        auditor.config.load_settings()


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"])
def test_postgres_urls_use_psycopg3(url):
    assert normalize_url(url).drivername == "postgresql+psycopg"


def test_sqlite_engine_turns_on_foreign_keys_and_wal(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'x.sqlite3'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()
