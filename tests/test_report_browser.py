"""report.html in a real browser: headless Chromium over the DevTools protocol (tests/browser.py).

Chromium is found on PATH or at $EVPACK_BROWSER (Debian: /usr/lib/chromium/chromium); without one these tests
skip. Pages are opened at 1,400 x 1,400 CSS pixels.

  - The reference packs' reports, re-rendered with today's code: no literal HTML tags and no raw Markdown
    (list markers, `**`, backslash escapes) in the visible text, also inside the collapsed parts; nothing wider
    than its box (tables fit, long names wrap); status cells coloured; every plot loads and sits in its
    section, not at the end; kernel names whole; the verdict, gates and leaderboard on the first screen.
  - The attack: a copy of the newest reference pack whose GPU name, build error line (derived by the build
    stage's own code from build.log), canary description and A/B row carry <script>, onerror=, javascript:
    links and a Markdown image. Its report runs nothing (window.__pwned stays undefined) and shows the hostile
    text as text. A control page rendered with raw HTML on shows the probe does see a payload that runs.
The first screen is kept as a PNG: its path is printed, and it is copied to $EVPACK_TEST_ARTIFACTS when set.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import reference
from browser import Browser, find_browser
from conftest import copy_pack

from evpack.jsonio import read_member_json, write_member_json
from evpack.packfs import member
from evpack.reporting.write import write_reports

NEWEST = reference.FULL  # the newest full-suite pack: its report.html as committed, the hostile copies' source
needs_newest = reference.needs("FULL")
SCREEN = 1400
TAGS = r"</?(details|summary|br|table|thead|tbody|tr|td|th|p|div|span|code|pre|strong|em|b|i|ul|ol|li|h[1-6]|img|a)\b[^>]*>"

PROBE = """(() => {
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const bottom = el => el.getBoundingClientRect().bottom + window.scrollY;
  const tableAfter = h => { let e = h.nextElementSibling;
    while (e && !e.querySelector('table') && e.tagName !== 'TABLE' && !/^H[12]$/.test(e.tagName)) e = e.nextElementSibling;
    return e && (e.tagName === 'TABLE' ? e : e.querySelector('table')); };
  const heads = Array.from(document.querySelectorAll('h2, h3'));
  const head = t => heads.find(h => h.textContent.trim().startsWith(t));
  const gates = head('Gates'), board = head('Leaderboard at the canonical shape');
  const h1 = document.querySelector('h1');
  const inCode = el => el.closest('pre, code');
  // Text a reader sees as prose: block elements' own lines, outside code.
  const prose = () => Array.from(document.querySelectorAll('p, li, td, th, summary, h1, h2, h3, h4, figcaption'))
      .filter(el => !inCode(el)).map(el => {
        const c = el.cloneNode(true); c.querySelectorAll('code, pre, ul, ol, table').forEach(x => x.remove());
        return c.textContent; });
  const overflow = () => Array.from(document.querySelectorAll('body *')).filter(el => {
        const s = getComputedStyle(el);
        return s.display !== 'inline' && s.display !== 'contents' && el.scrollWidth > el.clientWidth + 1; })
      .map(el => ({tag: el.tagName, cls: el.className, scroll: el.scrollWidth, client: el.clientWidth,
                   text: el.textContent.slice(0, 80)}));
  const out = {
    viewport: [window.innerWidth, window.innerHeight],
    page_height: document.documentElement.scrollHeight,
    page_width: document.documentElement.scrollWidth,
    h1: h1 ? {text: h1.innerText, bottom: bottom(h1)} : null,
    gates: gates && tableAfter(gates) ? {top: top(gates), bottom: bottom(tableAfter(gates))} : null,
    board: board && tableAfter(board) ? {top: top(board), bottom: bottom(tableAfter(board)),
            rows: tableAfter(board).rows.length} : null,
    images: Array.from(document.images).map(i => ({complete: i.complete, natural: i.naturalWidth,
                                                   shown: i.getBoundingClientRect().width, alt: i.alt, top: top(i)})),
    per_shape: head('Per shape') ? top(head('Per shape')) : null,
    after_plots: head('SDPA kernels that ran') ? top(head('SDPA kernels that ran')) : null,
    bench: head('bench') ? top(head('bench')) : null,
    status: Array.from(document.querySelectorAll('td.status')).map(td => ({cls: td.className, text: td.textContent,
             bg: getComputedStyle(td).backgroundColor, color: getComputedStyle(td).color})),
    details: document.querySelectorAll('details').length,
    closed_text: document.body.innerText,
    closed_prose: prose(),
    closed_overflow: overflow(),
  };
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  out.open_text = document.body.innerText;
  out.open_prose = prose();
  out.open_overflow = overflow();
  out.open_page_width = document.documentElement.scrollWidth;
  return out;
})()"""

ATTACK_PROBE = """new Promise(done => setTimeout(() => done({
  pwned: typeof window.__pwned,
  scripts: document.scripts.length,
  links: Array.from(document.querySelectorAll('[href]')).map(e => e.tagName + ' ' + e.getAttribute('href')),
  sources: Array.from(document.querySelectorAll('[src]')).map(e => e.getAttribute('src').slice(0, 30))
           .filter(s => !s.startsWith('data:image/png;base64,')),
  handlers: Array.from(document.querySelectorAll('*')).flatMap(e => Array.from(e.attributes)
           .filter(a => a.name.toLowerCase().startsWith('on')).map(a => e.tagName + ' ' + a.name)),
  tags: Array.from(new Set(Array.from(document.querySelectorAll('body *')).map(e => e.tagName))).sort(),
  text: (document.querySelectorAll('details').forEach(d => { d.open = true; }), document.body.innerText),
}), 500))"""


@pytest.fixture(scope="module")
def browser_exe():
    exe = find_browser()
    if exe is None:
        pytest.skip("no Chromium on PATH or at $EVPACK_BROWSER (Debian: apt-get install chromium; .ci/run installs "
                    "it as root)")
    return exe


def _open(exe: str, html: Path, tmp_path: Path, probe: str, shot: Path | None = None):
    profile = tmp_path / f"profile-{html.stem}-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    with Browser(exe, profile, SCREEN, SCREEN) as b:
        b.open(html.resolve().as_uri())
        # The images are data: URIs; wait until every one has decoded (or failed).
        b.evaluate("Promise.all(Array.from(document.images).map(i => i.decode().catch(() => null)))")
        r = b.evaluate(probe)
        if shot is not None:
            b.screenshot(shot, width=SCREEN, height=SCREEN)
    return r


def _keep(shot: Path) -> None:
    print(f"screenshot of the first screen: {shot}")
    keep = os.environ.get("EVPACK_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


def _no_literal_tags(r: dict) -> None:
    for which in ("closed_text", "open_text"):
        literal = re.findall(TAGS, r[which], flags=re.I)
        assert not literal, f"literal HTML tags in the page text ({which}): {literal[:10]}"


@pytest.mark.parametrize("pack", reference.param(("FULL", reference.FULL), ("DEFAULT", reference.DEFAULT)))
def test_rerendered_report_reads_in_headless_chromium(browser_exe, tmp_path, pack):
    html = write_reports(pack, tmp_path / "report", environ={}).html
    shot = tmp_path / f"report-first-screen-{pack.name}.png"
    r = _open(browser_exe, html, tmp_path, PROBE, shot)
    _keep(shot)
    (tmp_path / "probe.json").write_text(json.dumps({k: v for k, v in r.items() if "text" not in k}, indent=2))

    assert r["viewport"] == [SCREEN, SCREEN]
    _no_literal_tags(r)
    assert r["details"] >= 5
    assert "Per shape (graph mode)" in r["open_text"]
    # No raw Markdown: no line of prose starts with a list marker, none holds ** or a backslash escape.
    for which in ("closed_prose", "open_prose"):
        for text in r[which]:
            for line in text.splitlines():
                assert not re.match(r"\s*([-*+]|\d{1,9}[.)])\s", line), f"literal list marker ({which}): {line!r}"
            assert "**" not in text, f"literal emphasis marks ({which}): {text[:120]!r}"
            assert not re.search(r"\\[!-/:-@\[-`{-~]", text), f"a visible backslash escape ({which}): {text[:120]!r}"
    # Nothing wider than its box, closed or open: the tables fit the page, long names wrap.
    for which in ("closed_overflow", "open_overflow"):
        assert r[which] == [], f"{which}: {r[which][:5]}"
    assert r["page_width"] <= SCREEN and r["open_page_width"] <= SCREEN
    # Status cells are coloured by their class.
    pj = json.loads((pack / "pack.json").read_text())
    passes = [s for s in r["status"] if s["cls"] == "status pass"]
    assert len(passes) >= len(pj["gates"]) + len(pj["stages"])
    assert all(s["bg"] == "rgb(218, 251, 225)" and s["color"] == "rgb(14, 122, 44)" for s in passes), passes[:3]
    # Every plot loads, at most the content width (never wider than drawn), in the benchmark section right after the per-shape results.
    assert len(r["images"]) == len(list((pack / "bench").glob("*.png"))) >= 3, r["images"]
    for img in r["images"]:
        assert img["complete"] and img["natural"] > 0 and 0 < img["shown"] <= min(img["natural"], 1200), img
        assert r["bench"] < r["per_shape"] < img["top"] < r["after_plots"], (img, r["per_shape"], r["after_plots"])
    # The SDPA kernel names at the canonical shape whole, as the benchmark recorded them.
    summary = read_member_json(pack / "bench", "summary.json")
    names = {k for row in summary["rows"] if row["impl"] == "sdpa" and row.get("kernels") and row["shape"] ==
             summary["canonical"] and row["mode"] == summary["primary_mode"] for k in row["kernels"][:4]}
    assert names and all(" ".join(n.split()) in " ".join(r["open_text"].split()) for n in names)
    # The verdict, the gate table and the canonical leaderboard on the first screen.
    assert r["h1"] and pj["label"] == "evidence:complete" and pj["label"] in r["h1"]["text"]
    assert r["h1"]["bottom"] <= SCREEN
    assert r["gates"] and r["gates"]["bottom"] <= SCREEN, r["gates"]
    assert r["board"] and r["board"]["rows"] >= 1 + 12 and r["board"]["bottom"] <= SCREEN, r["board"]
    assert r["page_height"] > SCREEN
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_newest
def test_newest_pack_report_as_committed_still_opens(browser_exe, tmp_path):
    """The report.html a run of older code wrote into its pack (a view, covered by the pack's hashes): it opens,
    its plots load, it shows no tag as text."""
    r = _open(browser_exe, NEWEST / "report.html", tmp_path, PROBE)
    _no_literal_tags(r)
    assert r["images"] and all(i["complete"] and i["natural"] > 0 for i in r["images"])


# ------------------------------------------------------------------------------------------- attack
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
LINK = "[click me](javascript:window.__pwned=1)"
IMAGE = "![pwn](https://evil.example/x.png)"
SVG = "<svg onload=window.__pwned=1>"


def _hostile_pack(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    from evpack.stages import build

    pack = copy_pack(NEWEST, tmp_path)
    env = json.loads((pack / "env.json").read_text())
    env["gpu_name"] = f"NVIDIA {SCRIPT} H200 {IMG}"
    (pack / "env.json").write_text(json.dumps(env))
    # An honest failed build: nvcc quotes the source's #error line; the build stage derives its reason from it.
    (pack / "build" / "result.json").write_text(json.dumps({**json.loads((pack / "build" / "result.json").read_text()),
                                                           "returncode": 2}))
    with open(pack / "build" / "build.log", "a", encoding="utf-8") as log:
        log.write(f'csrc/x.cu(3): error: #error "{IMG}"\n')
    outcome = build.derive(pack / "build", pack)
    assert outcome.status == "fail" and IMG in outcome.reason
    (pack / "build" / "outcome.json").write_text(json.dumps(outcome.to_json()))
    pj = json.loads((pack / "pack.json").read_text())
    pj["stages"]["build"].update(status="fail", reason=outcome.reason)
    pj["gates"]["build"] = {"status": "fail", "reason": outcome.reason}
    pj["warnings"] = [f"{LINK} {IMAGE}"]
    (pack / "pack.json").write_text(json.dumps(pj))
    # A variant's description (the canary's planted fault) and the tool text it observed.
    canaries = json.loads((pack / "canaries" / "outcome.json").read_text())
    canaries["data"]["matrix"][0].update(fault=f"{SCRIPT} {LINK} {IMAGE}", observed=IMG)
    (pack / "canaries" / "outcome.json").write_text(json.dumps(canaries))
    # An A/B row of a variant with a hostile name, UNSURE: named in comment.md and in the report's table.
    ab = read_member_json(pack / "bench", "ab.json")
    ab["rows"][0].update(variant=SVG, verdict="UNSURE", reason=LINK)
    write_member_json(member(pack / "bench", "ab.json"), ab)
    return pack, {"gpu": f"NVIDIA {SCRIPT} H200 {IMG}", "build": f'#error "{IMG}"', "fault": f"{SCRIPT} {LINK} {IMAGE}",
                  "warning": f"{LINK} {IMAGE}", "variant": SVG}


@needs_newest
def test_hostile_pack_report_runs_nothing_and_shows_the_text(browser_exe, tmp_path):
    pack, shown = _hostile_pack(tmp_path)
    files = write_reports(pack, tmp_path / "report", environ={})
    shot = tmp_path / "report-first-screen-hostile.png"
    profile = tmp_path / "profile-attack"
    profile.mkdir()
    with Browser(browser_exe, profile, SCREEN, SCREEN) as b:
        b.open(files.html.resolve().as_uri())
        r = b.evaluate(ATTACK_PROBE)
        b.screenshot(shot, width=SCREEN, height=SCREEN)
    _keep(shot)
    assert r["pwned"] == "undefined"
    assert r["scripts"] == 0 and r["links"] == [] and r["sources"] == [] and r["handlers"] == [], r
    assert not {"SCRIPT", "SVG", "A", "IFRAME", "OBJECT", "EMBED"} & set(r["tags"]), r["tags"]
    text = " ".join(r["text"].split())
    for where, value in shown.items():
        assert value in text, f"the hostile {where} is not shown as text: {value!r}"
    # comment.md on GitHub: no link or image from the pack, the hostile row named as text.
    comment = files.comment.read_text(encoding="utf-8")
    live = re.findall(r"(?<!\\)(\]\(javascript|!\[|<script|<svg|<img)", comment.replace("`<svg onload", "`"))
    assert live == [], live  # each only escaped (or, for the row's name, inside a code span)
    unsure = sum(e["verdict"] == "UNSURE" for e in read_member_json(pack / "bench", "ab.json")["rows"])
    assert f"**UNSURE** ({unsure})" in comment and "`<svg onload=window.__pwned=1>/" in comment  # in a code span


def test_the_probe_sees_a_payload_that_runs(browser_exe, tmp_path):
    """Control: the same payloads through Markdown with raw HTML on (the renderer's setting before) do run in this
    browser, so an undefined window.__pwned above means they were inert, not that the probe is blind."""
    from markdown_it import MarkdownIt

    page = tmp_path / "unsafe.html"
    body = MarkdownIt("commonmark", {"html": True}).render(f"GPU: NVIDIA {IMG}\n\n{LINK}")
    page.write_text(f"<!DOCTYPE html><html><body>{body}</body></html>", encoding="utf-8")
    profile = tmp_path / "profile-control"
    profile.mkdir()
    with Browser(browser_exe, profile, SCREEN, SCREEN) as b:
        b.open(page.resolve().as_uri())
        r = b.evaluate(ATTACK_PROBE)
    assert r["pwned"] == "number" and r["handlers"] == ["IMG onerror"]
