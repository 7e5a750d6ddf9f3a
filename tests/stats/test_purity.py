"""`auditor.stats` must stay a pure numeric library."""

import subprocess
import sys

FORBIDDEN = ("sqlalchemy", "flask", "celery", "redis", "kombu", "alembic", "psycopg", "werkzeug")


def test_importing_stats_loads_no_service_library():
    code = (
        "import sys, auditor.stats\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"auditor.stats imported: {out.stdout.strip()}"
