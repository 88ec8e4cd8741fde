"""mover-audit's HTML report (`mover-audit report`, docs/audit.md) as a browser shows it: rendered in Debian's headless
Chromium, its figures checked to have drawn and a screenshot checked not to be blank. The report must load nothing
from elsewhere and run no script.

    dom = check_report_in_chromium(tmp_path / "report.html", tmp_path)
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def check_report_in_chromium(page: Path, tmp_path: Path) -> str:
    """Renders the page in headless Chromium, checks its figures drew and it is not blank; returns the DOM."""
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report must not load anything"
    assert "<script" not in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed to render the report"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium'}",
              "--window-size=1200,2400"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, check=True).stdout
    figures = re.findall(r'<div class="figure" id="(\w+)">(.*?)</div>', dom, re.S)
    assert {name for name, _ in figures} >= {"distribution", "deviation", "clusters", "worst", "plan"}
    for name, svg in figures:
        assert "<svg" in svg, f"{name}: no SVG in the rendered page"
        # Bars, boxes and lines are paths: a plot that drew has many (an empty axes has a handful).
        assert svg.count("<path") >= 20, f"{name}: only {svg.count('<path')} paths"
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120,
                   stdin=subprocess.DEVNULL, check=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[0] >= 1000
    not_white = (pixels < 0.95).any(axis=2).mean()
    colors = len({tuple(p) for p in (pixels[::7, ::7] * 255).astype(int).reshape(-1, 3)})
    assert not_white > 0.05 and colors > 20, f"the screenshot looks blank ({not_white:.3f} inked, {colors} colors)"
    return dom
