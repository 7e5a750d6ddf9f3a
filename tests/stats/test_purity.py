"""`auditor.stats` must stay a pure numeric library, and importing it cheap.

``import auditor.stats`` loads numpy and scipy only: no service library, and not pandas
either (pandas loads pyarrow, seconds of CPU for a notebook that wanted a kappa); the
functions that take or return frames import pandas when called.
"""

import json
import subprocess
import sys

FORBIDDEN = ("sqlalchemy", "flask", "celery", "redis", "kombu", "alembic", "psycopg", "werkzeug")
#: Loaded by the functions that use them, never by the import.
ON_USE = ("pandas", "pyarrow", "matplotlib", "statsmodels", "sklearn")


def _loaded_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_stats_loads_numpy_and_scipy_and_no_service_library():
    loaded = _loaded_after("import auditor.stats")
    assert {"numpy", "scipy"} <= loaded
    assert not loaded & {*FORBIDDEN, *ON_USE}, f"auditor.stats imported: {sorted(loaded & {*FORBIDDEN, *ON_USE})}"


def test_a_function_that_returns_frames_loads_pandas_when_called():
    loaded = _loaded_after(
        "import auditor.stats as st\n"
        "st.counts_from_records({'item_id': [1, 1], 'annotator_id': ['a', 'b'], 'label': ['x', 'y']}).to_frame()")
    assert "pandas" in loaded
    assert not loaded & set(FORBIDDEN)
