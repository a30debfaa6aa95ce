"""A real headless Chromium for the HTML report: how wide a page lays out, which sections
it has, and a screenshot.

Chromium comes from the system packages (``make browser-tools``, run by ``make test``,
installs it where it can); a test that needs it fails without it - never skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-extensions",
)
# Written into the page once it has loaded (images decoded): what the test reads back.
MEASURE = """<script>
window.addEventListener("load", function () {
  var root = document.documentElement, out = document.createElement("pre");
  out.id = "measured";
  var sections = Array.prototype.map.call(document.querySelectorAll("section.device"),
    function (s) {
      return s.id + ":" + Array.prototype.map.call(s.querySelectorAll("h3"),
        function (h) { return h.textContent.split(" (")[0]; }).join("|");
    });
  var widest = 0;
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (e) {
    widest = Math.max(widest, e.getBoundingClientRect().right);
  });
  out.textContent = JSON.stringify({scrollWidth: root.scrollWidth,
    clientWidth: root.clientWidth, widest: Math.ceil(widest), sections: sections});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    """The Chromium executable; the test fails when there is none."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no Chromium: `make browser-tools` installs it (apt-get install chromium)", pytrace=False
    )
    raise AssertionError  # (unreachable: pytest.fail raises)


def _run(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(folder))  # (its profile: never the user's)
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={folder / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def measure(page: str, folder: Path, width: int = 1400) -> dict:
    """Lay ``page`` (HTML text) out in Chromium ``width`` px wide: ``scrollWidth``,
    ``clientWidth``, ``widest`` (the right edge of the widest element) and
    ``sections`` (``"device-1:Figures|What the memory is|..."`` per device section)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "measured.html"
    copy.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    out = _run(
        [f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()],
        folder,
    )
    got = re.search(r'<pre id="measured">(.*?)</pre>', out.stdout, re.S)
    assert got, f"Chromium did not lay the page out: {out.stderr[-2000:]}"
    return json.loads(got.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def screenshot(page_path: Path, png: Path, width: int = 1400, height: int = 3000) -> Path:
    """A PNG of ``page_path`` as Chromium draws it ``width`` px wide."""
    out = _run(
        [f"--window-size={width},{height}", f"--screenshot={png}", page_path.resolve().as_uri()],
        png.parent,
    )
    assert png.exists() and png.stat().st_size > 0, out.stderr[-2000:]
    return png
