"""The widgets render and respond in a real front end: JupyterLab driven by headless Chromium.

Starts JupyterLab on loopback and Debian's Chromium (never a downloaded browser), in a
1000 px window with the file browser open, runs a notebook with every view (pool grid,
block-table stepper, eviction replay, prefix tree, engine replay, a 512-block pool, the
chapter 00/05 pictures), checks the DOM against the kernel-side state, clicks step, plays and
stops, checks the sliders' width and computes the text contrast of every picture from the DOM
in the light and the dark theme; then opens a notebook stored with outputs without running
it (the static pictures must show). Screenshots of each view go to test-artifacts/. Every
process it starts is ended by id.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

VIEW_CELL = """\
from paged_kv import KVCacheManager
from paged_kv.study.operations import decode_workload
from paged_kv.widgets import BlockPoolView, OperationStepper

manager = KVCacheManager(16, 4, blocks_per_page=4, allocation="pack_pages")
manager.add_sequence("a", range(10))
manager.add_sequence("b", range(5))
manager.pool.share(manager.block_table("a")[:1])
view = BlockPoolView(manager)
view"""
STEPPER_CELL = """\
ops = decode_workload([("a", 3), ("b", 4)], decode_steps=4, finish_after={"b": 2})
stepper = OperationStepper(KVCacheManager(8, 2, blocks_per_page=4), ops)
stepper"""
TRACE_CELL = """\
from paged_kv.study.workloads import shared_prefixes
from paged_kv.widgets import TraceReplayView

trace_view = TraceReplayView(
    shared_prefixes(60, num_prefixes=8, seed=4), capacity=16, policy="lfu", request_blocks=6
)
trace_view"""
TREE_CELL = """\
from paged_kv.study.operations import Add, Append, Fork, Free
from paged_kv.widgets import PrefixTreeView

system = tuple(range(1000, 1012))
tree_ops = [Add("a", (*system, 1, 2)), Add("b", (*system, 5, 6, 7)), Fork("b", "b2"),
            Append("b2", (70,)), Free("a")]
tree_view = PrefixTreeView(KVCacheManager(16, 4), tree_ops, start=4)
tree_view"""
ENGINE_CELL = """\
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.serving.scheduler import SamplingParams
from paged_kv.widgets import EngineReplayView

engine = Engine(TinyLM(seed=0), num_blocks=8, block_size=4, max_running=3)
for prompt in ("a shared prefix: one", "a shared prefix: two", "x"):
    engine.add_request(prompt, SamplingParams(6))
engine_view = EngineReplayView(engine, start=1)
engine_view"""
BIG_CELL = """\
big = KVCacheManager(512, 16, blocks_per_page=16, allocation="pack_pages")
for i in range(40):
    big.add_sequence(i, range(20 + 9 * i))
big_view = BlockPoolView(big)
big_view"""
PICTURES_CELL = """\
from IPython.display import HTML, display

from paged_kv.widgets import StripRequest, render_decode_gather, render_memory_strips

requests = [StripRequest("A", 20, 28), StripRequest("B", 6, 18), StripRequest("C", 9, 30)]
display(HTML(render_memory_strips(requests, capacity=112, max_length=32, block_size=4)))
display(HTML(render_decode_gather([7, 2, 9, 4], 15, 4, 12, splits=2)))"""
CELLS = [VIEW_CELL, STEPPER_CELL, TRACE_CELL, TREE_CELL, ENGINE_CELL, BIG_CELL, PICTURES_CELL]
# The pictures drawn on our own cards, whose text contrast is computed in the browser.
CARDS = (
    ".paged-kv-pool, .paged-kv-map, .paged-kv-eviction, .paged-kv-tree, .paged-kv-gantt, "
    ".paged-kv-strips, .paged-kv-gather, .paged-kv-caption, .paged-kv-queues"
)


# Every code cell shows its execution count ("[3]:"; textContent reads cells out of view too)
# and the kernel is idle again.
ALL_CELLS_RAN = """n => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    const kernel = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return prompts.length === n && prompts.every(p => /\\[\\d+\\]/.test(p.textContent))
        && kernel?.status === "idle";
}"""

KERNEL_READY = """() => {
    const kernel = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return kernel && kernel.status === "idle" && kernel.connectionStatus === "connected";
}"""

# WCAG contrast of every text node inside the cards: its computed colour against the first
# opaque background up the tree (the page's own when a card forgot one).
CONTRAST_JS = """sel => {
    const parse = c => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
        const p = m[1].split(",").map(Number);
        return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
    const lin = v => { v /= 255;
        return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    const lum = c => 0.2126 * lin(c.r) + 0.7152 * lin(c.g) + 0.0722 * lin(c.b);
    const bg = el => { for (; el; el = el.parentElement) {
        const c = parse(getComputedStyle(el).backgroundColor); if (c && c.a > 0.5) return c; }
        return {r: 255, g: 255, b: 255, a: 1}; };
    const out = [];
    for (const root of document.querySelectorAll(sel)) {
        const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
            const el = n.parentElement;
            if (!n.textContent.trim() || el.closest("style")) continue;
            const a = lum(parse(getComputedStyle(el).color)), b = lum(bg(el));
            const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
            out.push([n.textContent.trim().slice(0, 24), ratio]);
        }
    }
    return out;
}"""


def kernel_side_states() -> dict:
    """What the kernel will hold: the view's states and the stepper's first two states."""
    from paged_kv.widgets import block_kind

    scope: dict = {}
    exec(VIEW_CELL + "\n" + STEPPER_CELL, scope)  # the same code the notebook runs
    kinds = lambda snap: [block_kind(b) for b in snap.blocks]  # noqa: E731
    return {
        "view": kinds(scope["manager"].snapshot()),
        "stepper": [kinds(s) for s in scope["stepper"].snapshots[:2]],
        "steps": len(scope["ops"]),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {seconds} s")


def end_processes(pids: list[int]) -> None:
    """Terminate each process by id, then kill what is left after a grace period."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass  # not our child (a kernel): fall back to signal 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def services():
    """JupyterLab and Chromium, each on its own loopback port; yields their URLs."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed")
    psutil = pytest.importorskip("psutil")
    workdir = Path(tempfile.mkdtemp(prefix="paged-kv-browser-"))
    (workdir / "notebooks").mkdir()
    settings = workdir / "settings" / "@jupyterlab"
    for extension, name, value in [
        ("apputils-extension", "notification", '{"fetchNews": "false"}'),  # no news toast
        ("notebook-extension", "tracker", '{"autoStartDefaultKernel": true}'),  # no kernel dialog
    ]:
        (settings / extension).mkdir(parents=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(value)
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(cell) for cell in CELLS],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, workdir / "notebooks" / "widgets_check.ipynb")
    # The same stepper executed here and stored with its outputs, as the course's notebooks
    # are: opened without running it must show the picture, not the widget's repr.
    stored = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(VIEW_CELL + "\n" + STEPPER_CELL)], metadata=nb.metadata
    )
    NotebookClient(stored, timeout=120, kernel_name="python3").execute()
    nbformat.write(stored, workdir / "notebooks" / "stored_outputs.ipynb")
    lab_port, cdp_port = free_port(), free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    lab_log = open(ARTIFACTS / "jupyterlab.log", "w")  # noqa: SIM115 - closed in finally
    lab = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            f"--port={lab_port}", "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=",
            "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={workdir / 'notebooks'}", "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={workdir / 'settings'}",
            f"--LabApp.workspaces_dir={workdir / 'workspaces'}",
        ],
        stdout=lab_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    browser = subprocess.Popen(
        [
            CHROMIUM, *CHROMIUM_FLAGS, f"--remote-debugging-port={cdp_port}",
            f"--user-data-dir={workdir / 'chromium-profile'}", "about:blank",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{lab_port}/api/status", 60)
        wait_for(f"http://127.0.0.1:{cdp_port}/json/version", 30)
        yield {"lab": f"http://127.0.0.1:{lab_port}", "cdp": f"http://127.0.0.1:{cdp_port}"}
    finally:
        started = [lab.pid, browser.pid]
        for root in (lab, browser):  # kernels and browser helpers, found before their parents go
            with contextlib.suppress(psutil.NoSuchProcess):
                started += [c.pid for c in psutil.Process(root.pid).children(recursive=True)]
        end_processes(started)
        lab_log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def test_widgets_render_and_step_in_jupyterlab(services):
    from playwright.sync_api import sync_playwright

    expected = kernel_side_states()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(services["cdp"])
        page = browser.contexts[0].new_page()
        page.set_viewport_size({"width": 1000, "height": 1100})  # with the file browser open
        try:
            check_notebook(page, services["lab"], expected)
            check_controls(page)
            check_contrast_and_screenshots(page, "light")
            page.evaluate(
                "() => window.jupyterapp.commands.execute("
                "'apputils:change-theme', {theme: 'JupyterLab Dark'})"
            )
            page.wait_for_function(
                "() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000
            )
            check_contrast_and_screenshots(page, "dark")
            check_stored_outputs(page, services["lab"])
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "widgets_failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def check_notebook(page, lab_url: str, expected: dict) -> None:
    """Open and run the notebook, then compare the DOM with the kernel-side states."""
    states = "els => els.map(e => e.dataset.state)"
    page.goto(f"{lab_url}/lab/tree/widgets_check.ipynb")
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
    page.wait_for_selector(".jp-FileBrowser", state="visible", timeout=30_000)
    page.wait_for_function(KERNEL_READY, timeout=60_000)  # else run-all finds no kernel
    # Fire and forget: the command's promise settles only when every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(ALL_CELLS_RAN, arg=len(CELLS), timeout=180_000)  # one runs a model

    # JupyterLab skips rendering cells out of view (content-visibility: auto), and then their
    # innerText is empty: bring each widget into view before reading what it shows.
    view = page.locator(".jp-Cell").nth(0).locator(".paged-kv-grid [data-block-id]")
    stepper = page.locator(".paged-kv-stepper .paged-kv-map [data-block-id]")
    view.first.wait_for(state="attached", timeout=60_000)
    stepper.first.wait_for(state="attached", timeout=60_000)
    assert view.evaluate_all(states) == expected["view"]
    assert stepper.evaluate_all(states) == expected["stepper"][0]
    page.locator(".jp-Cell").nth(0).scroll_into_view_if_needed()
    assert page.locator(".jp-Cell").nth(0).get_by_text("page 3 · releasable").count() == 1
    page.locator(".paged-kv-stepper").scroll_into_view_if_needed()
    page.wait_for_function(  # the caption is a widget of its own: it may come a moment later
        "() => document.querySelector('.paged-kv-stepper .paged-kv-caption')?.innerText"
        ".includes('step 0/')",
        timeout=30_000,
    )

    page.locator(".paged-kv-stepper button", has_text="step ▶").click()
    # The caption and the map are separate widgets: wait until both have redrawn.
    page.wait_for_function(
        """want => [...document.querySelectorAll('.paged-kv-stepper .paged-kv-map [data-block-id]')]
            .map(e => e.dataset.state).join() === want""",
        arg=",".join(expected["stepper"][1]),
        timeout=30_000,
    )
    assert stepper.evaluate_all(states) == expected["stepper"][1]
    assert f"step 1/{expected['steps']}" in page.locator(".paged-kv-stepper").inner_text()
    assert "add a: blocks" in page.locator(".paged-kv-stepper [data-changes]").inner_text()

    for selector in (  # every other view rendered
        ".paged-kv-trace .paged-kv-eviction",
        ".paged-kv-tree-view .paged-kv-tree",
        ".paged-kv-engine .paged-kv-gantt",
        ".paged-kv-strips",
        ".paged-kv-gather",
    ):
        page.locator(selector).first.wait_for(state="attached", timeout=60_000)
    big = page.locator(".jp-Cell").nth(5).locator(".paged-kv-pool")
    big.wait_for(state="attached", timeout=60_000)
    assert big.locator("[data-block-id]").count() == 512
    assert big.bounding_box()["height"] < 700  # 512 blocks fit one screen
    trace = page.locator(".paged-kv-trace")
    trace.scroll_into_view_if_needed()
    assert trace.get_by_text("evicted key").count() >= 1
    assert page.locator(".paged-kv-tree [data-state='in_use']").count() >= 4

    body = page.text_content("body")  # every cell's text, in view or not
    assert "Error displaying widget" not in body and "Traceback" not in body
    assert page.locator('[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0


def check_controls(page) -> None:
    """At 1000 px with the file browser open, each stepper's slider keeps a usable width
    and its controls sit on one row above the picture; speed, play and stop work."""
    for slider in page.locator(".paged-kv-controls .slider-container").all():
        assert slider.bounding_box()["width"] >= 150
    trace = page.locator(".paged-kv-trace")
    controls = trace.locator(".paged-kv-controls")
    assert controls.bounding_box()["y"] < trace.locator(".paged-kv-eviction").bounding_box()["y"]
    caption = trace.locator(".paged-kv-caption")
    before = caption.inner_text()
    trace.locator("button", has_text="step ▶").click()
    page.wait_for_function(
        "old => document.querySelector('.paged-kv-trace .paged-kv-caption').innerText !== old",
        arg=before,
        timeout=30_000,
    )
    trace.locator("select").select_option(label="fastest (0.1 s)")
    trace.locator(".widget-play button").first.click()  # play
    page.wait_for_timeout(1500)
    trace.locator("button", has_text="■ stop").click()
    page.wait_for_timeout(500)  # let the last step land
    stopped = caption.inner_text()
    page.wait_for_timeout(1000)
    assert caption.inner_text() == stopped  # stop stays where it is, and stays stopped
    shown = int(stopped.split("/")[0].split()[-1])
    assert shown > int(before.split("/")[0].split()[-1]) + 1


def check_contrast_and_screenshots(page, theme: str) -> None:
    """Text contrast computed from the DOM (at least 4.5:1), and a screenshot of each view."""
    ratios = page.evaluate(CONTRAST_JS, CARDS)
    assert len(ratios) > 200
    worst = min(ratios, key=lambda r: r[1])
    assert worst[1] >= 4.5, f"{theme}: {worst}"
    (ARTIFACTS / f"contrast_{theme}.txt").write_text(
        f"{len(ratios)} texts, lowest contrast {worst[1]:.2f}:1 ({worst[0]!r})\n"
    )
    page.screenshot(path=str(ARTIFACTS / f"widgets_in_jupyterlab_{theme}.png"), full_page=True)
    for name, selector in [
        ("pool", ".jp-Cell:nth-child(1) .paged-kv-grid"),
        ("stepper_map", ".paged-kv-stepper"),
        ("eviction", ".paged-kv-trace"),
        ("prefix_tree", ".paged-kv-tree-view"),
        ("engine", ".paged-kv-engine"),
        ("compact_512", ".jp-Cell:nth-child(6) .paged-kv-pool"),
        ("pictures", ".jp-Cell:nth-child(7) .jp-Cell-outputArea"),
    ]:
        element = page.locator(selector).first
        element.scroll_into_view_if_needed()
        element.screenshot(path=str(ARTIFACTS / f"{name}_{theme}.png"))


def check_stored_outputs(page, lab_url: str) -> None:
    """A notebook stored with its outputs, opened and not run (so not trusted either): the
    stepper's output shows its static picture, the map, not the widget's repr."""
    page.goto(f"{lab_url}/lab/tree/stored_outputs.ipynb")
    panel = page.locator(".jp-NotebookPanel:visible").last
    picture = panel.locator(".jp-OutputArea-output .paged-kv-map")
    picture.wait_for(state="visible", timeout=60_000)
    assert "step 0/" in panel.locator(".jp-OutputArea-output").last.inner_text()
    assert "static picture of step 0" in panel.inner_text()
    assert "OperationStepper(children" not in panel.inner_text()
    panel.locator(".jp-Cell").first.screenshot(path=str(ARTIFACTS / "stored_outputs_dark.png"))
