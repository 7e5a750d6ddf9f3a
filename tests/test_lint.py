"""The code base passes the linter configured in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is installed with the test extra"
    out = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
