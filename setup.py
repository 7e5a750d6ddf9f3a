"""Ships the top-level ``migrations/`` (Alembic's scripts) inside the package, as
``auditor/_migrations``, where an installed Auditor finds them; everything else is in
pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithMigrations(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "auditor" / "_migrations"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(ROOT / "migrations", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithMigrations})
