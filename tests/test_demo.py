"""The README's first command: `auditor demo` serves a seeded, audited dashboard.

Runs the real thing in a subprocess on a fresh instance folder (SQLite file, a Celery
worker on the server-less SQLite broker, gunicorn), then checks it over HTTP and in
headless Chromium, and saves a screenshot under test-artifacts/.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("AUDITOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def demo(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
    env["AUDITOR_INSTANCE_PATH"] = str(tmp_path / "instance")
    log = open(tmp_path / "demo.log", "w+", encoding="utf-8")
    # the README's command, verbatim but for the port (the default 2,000 items)
    proc = subprocess.Popen([sys.executable, "-m", "auditor", "demo", "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            log.seek(0)
            text = log.read()
            if "password:" in text:
                try:
                    urllib.request.urlopen(url + "/login", timeout=2)
                    break
                except OSError:
                    pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"auditor demo did not come up:\n{text[-3000:]}")
            time.sleep(0.5)
        password = re.search(r"password: (\S+)", text).group(1)
        yield url, password, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_demo_serves_an_audited_dashboard(demo):
    url, password, log = demo
    log.seek(0)
    text = log.read()
    assert f"Auditor is running at {url}/" in text
    assert "workspace: demo   email: admin@demo.local" in text
    with urllib.request.urlopen(url + "/login", timeout=5) as resp:
        assert resp.status == 200 and b"Log in" in resp.read()

    if shutil.which(CHROMIUM) is None:
        msg = f"Chromium not found at {CHROMIUM} (Debian: apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url + "/login")
        page.fill("input[name=workspace]", "demo")
        page.fill("input[name=email]", "admin@demo.local")
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        # The worker audits the seeded data in the background: wait for the verdicts.
        deadline = time.monotonic() + 180
        while "certified (U_t, anytime)" not in page.content():
            if time.monotonic() > deadline:
                log.seek(0)
                pytest.fail("no audit result appeared on the overview:\n" + log.read()[-4000:])
            time.sleep(1)
            page.reload()
        assert "sentiment-classifier" in page.content()
        # The weekly dataset's audit finds the vendor that got worse in week 11 and says so.
        while "vendor bolt-annotations: agreement with the other annotators dropped" not in page.content():
            if time.monotonic() > deadline:
                log.seek(0)
                pytest.fail("no quality-change alert appeared on the overview:\n" + log.read()[-4000:])
            time.sleep(1)
            page.reload()
        page.screenshot(path=str(ARTIFACTS / "demo-overview.png"), full_page=True)
        page.click("table#datasets a[href^='/datasets/']")
        page.wait_for_selector('figure.chart[data-rendered="true"] canvas')  # the charts are drawn (uPlot)
        assert page.locator('figure.chart[data-rendered="error"]').count() == 0
        page.screenshot(path=str(ARTIFACTS / "demo-dataset.png"), full_page=True)
        browser.close()
    assert requests and all(r.startswith(url) or r.startswith("data:") for r in requests), \
        [r for r in requests if not r.startswith(url)]
