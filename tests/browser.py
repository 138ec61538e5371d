"""Headless Chromium driven over the DevTools protocol: set the session cookie, open a page, act on it (a script,
as a user's typing and clicks), read its text and take a screenshot. (Chromium's `--screenshot` flag cannot send a
cookie, and every page here needs one.)"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import websockets


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise AssertionError("headless Chromium is needed for the UI tests: apt-get install chromium")


# the page's text and that of its same-origin frames (Airflow shows plugin pages in an iframe)
_PAGE_TEXT = """document.readyState + '\\n' + (document.body ? document.body.innerText : '') + '\\n' +
  Array.from(document.querySelectorAll('iframe')).map(f => {
    try { return f.contentDocument.body.innerText } catch (e) { return '' } }).join('\\n')"""

# the charts' accessible names (each SVG's aria-label), in the page and its same-origin frames
_CHART_LABELS = """JSON.stringify([document, ...Array.from(document.querySelectorAll('iframe')).map(f => {
    try { return f.contentDocument } catch (e) { return null } })].filter(d => d).flatMap(
  d => Array.from(d.querySelectorAll('svg[aria-label]')).map(s => s.getAttribute('aria-label'))))"""


@dataclass
class Page:
    text: str
    png: bytes
    chart_labels: list[str] = field(default_factory=list)


def open_page(url: str, cookies: dict[str, str], *, width: int = 1400, height: int = 900,
              settle_s: float = 1.0, wait_for_text: str | None = None, timeout_s: float = 60,
              script: str | None = None) -> Page:
    """`script`: JavaScript run once the page has loaded (before waiting for `wait_for_text`)."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:  # Chromium may still write
        proc = subprocess.Popen([chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                 "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + timeout_s
            while not port_file.exists() or not port_file.read_text().strip():
                assert time.monotonic() < deadline and proc.poll() is None, "Chromium did not start"
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                target = next(t for t in json.load(r) if t["type"] == "page")
            return asyncio.run(_drive(target["webSocketDebuggerUrl"], url, cookies, width, height, settle_s,
                                      wait_for_text, timeout_s, script))
        finally:
            proc.kill()
            proc.wait()


async def _drive(ws_url: str, url: str, cookies: dict[str, str], width: int, height: int, settle_s: float,
                 wait_for_text: str | None, timeout_s: float, script: str | None) -> Page:
    ids = itertools.count(1)
    async with websockets.connect(ws_url, max_size=64 * 1024 * 1024) as ws:
        async def call(method: str, **params):
            msg_id = next(ids)
            await ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == msg_id:
                    assert "error" not in msg, msg
                    return msg.get("result", {})

        await call("Network.enable")
        for name, value in cookies.items():
            await call("Network.setCookie", name=name, value=value, url=url)
        await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        await call("Page.enable")
        await call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            result = await call("Runtime.evaluate", expression=_PAGE_TEXT, returnByValue=True)
            state, _, text = result["result"]["value"].partition("\n")
            if state == "complete" and script is not None:
                await call("Runtime.evaluate", expression=script)
                script = None
                continue
            if state == "complete" and (wait_for_text is None or wait_for_text in text):
                break
        await asyncio.sleep(settle_s)
        shot = await call("Page.captureScreenshot", format="png")
        labels = await call("Runtime.evaluate", expression=_CHART_LABELS, returnByValue=True)
        return Page(text, base64.b64decode(shot["data"]), json.loads(labels["result"]["value"]))
