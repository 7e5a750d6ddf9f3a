"""Refresh (or check) the browser libraries vendored under ``auditor/web/static/vendor``.

The dashboards serve their chart library (uPlot, MIT) and the API docs page its viewer
(Swagger UI, Apache-2.0) from Auditor itself: no CDN, and the Content-Security-Policy
allows scripts from this origin only. The accessibility tests' checker (axe-core, MPL-2.0)
is pinned here too: the tests load it into each page from this origin; no page does. Which package, version and files are vendored,
and the SHA-256 of each file, is pinned in ``auditor/web/static/vendor/vendored.json``.

    python scripts/refresh_vendored.py --check          # the committed files match the pins (offline)
    python scripts/refresh_vendored.py                  # re-download the pinned versions with npm and
                                                        # verify them (tarball integrity and file hashes)
    python scripts/refresh_vendored.py --bump uplot 1.6.33   # move a package to another version: downloads
                                                        # it, copies its files, re-pins the hashes

Downloads go through ``npm pack`` (the npm registry's ordinary client); the tarball's
integrity must equal the one pinned (or, with ``--bump``, the one the registry publishes).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "auditor" / "web" / "static" / "vendor"
MANIFEST = VENDOR / "vendored.json"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load() -> dict:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def check(manifest: dict) -> list[str]:
    """Every pinned file is present with its pinned hash; returns the problems found."""
    problems = []
    for name, entry in manifest["packages"].items():
        for source, pin in entry["files"].items():
            target = VENDOR / pin["to"]
            if not target.is_file():
                problems.append(f"{name}: {pin['to']} is missing (from {source})")
            elif sha256(target) != pin["sha256"]:
                problems.append(f"{name}: {pin['to']} does not match its pinned SHA-256")
    return problems


def npm_pack(package: str, version: str, workdir: Path) -> tuple[Path, str]:
    """``npm pack package@version`` into ``workdir``: the tarball and its sha512 integrity."""
    out = subprocess.run(["npm", "pack", f"{package}@{version}", "--json", "--pack-destination", str(workdir)],
                         capture_output=True, text=True, check=True)
    info = json.loads(out.stdout)[0]
    tarball = workdir / info["filename"]
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if digest != info["integrity"]:
        raise SystemExit(f"{package}@{version}: the tarball does not match the integrity npm reported")
    return tarball, digest


def extract(tarball: Path, workdir: Path) -> Path:
    root = workdir / "unpacked"
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    return root / "package"


def refresh(manifest: dict, name: str, *, version: str | None = None) -> None:
    entry = manifest["packages"][name]
    bump = version is not None and version != entry["version"]
    version = version or entry["version"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tarball, integrity = npm_pack(entry["package"], version, work)
        if not bump and integrity != entry["integrity"]:
            raise SystemExit(f"{name}@{version}: the registry's tarball differs from the pinned one")
        package = extract(tarball, work)
        for source, pin in entry["files"].items():
            got = package / source
            if not got.is_file():
                raise SystemExit(f"{name}@{version}: the package has no {source}")
            if not bump and sha256(got) != pin["sha256"]:
                raise SystemExit(f"{name}@{version}: {source} differs from its pinned SHA-256")
            target = VENDOR / pin["to"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(got, target)
            pin["sha256"] = sha256(target)
    entry["version"], entry["integrity"] = version, integrity
    print(f"{name}: {entry['package']}@{version} ({len(entry['files'])} files)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only verify the committed files against the pins")
    ap.add_argument("--bump", nargs=2, metavar=("NAME", "VERSION"), help="move one package to another version")
    args = ap.parse_args()
    manifest = load()
    if args.check:
        problems = check(manifest)
        for p in problems:
            print(p, file=sys.stderr)
        print("vendored files: " + ("OK" if not problems else f"{len(problems)} problem(s)"))
        raise SystemExit(1 if problems else 0)
    if shutil.which("npm") is None:
        raise SystemExit("npm not found: it downloads the packages from the npm registry")
    if args.bump:
        name, version = args.bump
        if name not in manifest["packages"]:
            raise SystemExit(f"unknown package {name!r}; one of {sorted(manifest['packages'])}")
        refresh(manifest, name, version=version)
    else:
        for name in manifest["packages"]:
            refresh(manifest, name)
    MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    problems = check(manifest)
    if problems:
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main()
