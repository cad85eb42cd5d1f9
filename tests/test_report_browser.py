"""report.html in a real browser: headless Chromium over the DevTools protocol (tests/browser.py).

The full-suite reference pack's report is re-rendered with today's code into tmp_path and opened at
1,400 x 1,400 CSS pixels. Asserted: the visible text holds no literal HTML tags (also inside the
collapsed <details>, opened for the check), every image loads, and the verdict, the gate table and the
canonical leaderboard end within the first 1,400 px. The first screen is kept as a PNG: its path is
printed, and it is copied to $EVPACK_TEST_ARTIFACTS when that is set.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from browser import Browser, find_browser
from conftest import REPO

from evpack.reporting.write import write_reports

PACK = REPO / "artifacts" / "reference" / "20261121T142018Z-b40b5c2fd4c6"
SCREEN = 1400
TAGS = r"</?(details|summary|br|table|thead|tbody|tr|td|th|p|div|span|code|pre|strong|em|b|i|ul|ol|li|h[1-6]|img|a)\b[^>]*>"

PROBE = """(() => {
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const bottom = el => el.getBoundingClientRect().bottom + window.scrollY;
  const tableAfter = h => { let e = h.nextElementSibling;
    while (e && e.tagName !== 'TABLE' && !/^H[12]$/.test(e.tagName)) e = e.nextElementSibling;
    return e && e.tagName === 'TABLE' ? e : null; };
  const heads = Array.from(document.querySelectorAll('h2'));
  const gates = heads.find(h => h.textContent.trim() === 'Gates');
  const board = heads.find(h => h.textContent.startsWith('Leaderboard at the canonical shape'));
  const h1 = document.querySelector('h1');
  const out = {
    viewport: [window.innerWidth, window.innerHeight],
    page_height: document.documentElement.scrollHeight,
    h1: h1 ? {text: h1.innerText, bottom: bottom(h1)} : null,
    gates: gates && tableAfter(gates) ? {top: top(gates), bottom: bottom(tableAfter(gates))} : null,
    board: board && tableAfter(board) ? {top: top(board), bottom: bottom(tableAfter(board)),
            rows: tableAfter(board).rows.length} : null,
    images: Array.from(document.images).map(i => ({complete: i.complete, natural: i.naturalWidth,
                                                   shown: i.getBoundingClientRect().width, alt: i.alt})),
    details: document.querySelectorAll('details').length,
    closed_text: document.body.innerText,
  };
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  out.open_text = document.body.innerText;
  return out;
})()"""


@pytest.fixture(scope="module")
def browser_exe():
    exe = find_browser()
    if exe is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it as root)")
    return exe


NEWEST = sorted(p for p in (REPO / "artifacts" / "reference").glob("2*") if (p / "index.json").exists())[-1]


@pytest.mark.parametrize("case", ["rerendered-2026-11-21-pack", "newest-pack-as-committed"])
def test_report_html_in_headless_chromium(browser_exe, tmp_path, case):
    import re

    if case == "newest-pack-as-committed":  # the report.html a run of this code wrote into its pack
        html = NEWEST / "report.html"
    else:
        html = write_reports(PACK, tmp_path / "report", environ={}).html
    profile = tmp_path / "profile"
    profile.mkdir()
    shot = tmp_path / f"report-first-screen-{case}.png"
    with Browser(browser_exe, profile, SCREEN, SCREEN) as b:
        b.open(html.resolve().as_uri())
        # The images are data: URIs; wait until every one has decoded (or failed).
        b.evaluate("Promise.all(Array.from(document.images).map(i => i.decode().catch(() => null)))")
        r = b.evaluate(PROBE)
        b.screenshot(shot, width=SCREEN, height=SCREEN)
    print(f"screenshot of the first screen: {shot}")
    keep = os.environ.get("EVPACK_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    (tmp_path / "probe.json").write_text(json.dumps({k: v for k, v in r.items() if not k.endswith("_text")}, indent=2))

    assert r["viewport"] == [SCREEN, SCREEN]
    for which in ("closed_text", "open_text"):
        literal = re.findall(TAGS, r[which], flags=re.I)
        assert not literal, f"literal HTML tags in the page text ({which}): {literal[:10]}"
    assert r["details"] >= 5
    assert "<details>" not in r["open_text"] and "Per shape (graph mode)" in r["open_text"]

    source = NEWEST if case == "newest-pack-as-committed" else PACK
    assert len(r["images"]) == len(list((source / "bench").glob("*.png"))) >= 3, r["images"]
    for img in r["images"]:
        assert img["complete"] and img["natural"] > 0, img

    assert r["h1"] and "evidence:complete" in r["h1"]["text"] and r["h1"]["bottom"] <= SCREEN
    assert r["gates"] and r["gates"]["bottom"] <= SCREEN, r["gates"]
    assert r["board"] and r["board"]["rows"] >= 1 + 12 and r["board"]["bottom"] <= SCREEN, r["board"]
    assert r["page_height"] > SCREEN  # the rest of the report follows below the first screen
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
