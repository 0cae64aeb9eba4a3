"""The widgets render and respond in a real front end: JupyterLab driven by headless Chromium.

Starts JupyterLab on loopback and Debian's Chromium (never a downloaded browser), runs a
notebook with a `BlockPoolView` and an `OperationStepper`, checks the grid in the DOM against
the kernel-side state, clicks the stepper's step button, and saves a screenshot to
test-artifacts/. Every process it starts is ended by id.
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


KERNEL_READY = """() => {
    const kernel = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;
    return kernel && kernel.status === "idle" && kernel.connectionStatus === "connected";
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
        cells=[nbformat.v4.new_code_cell(VIEW_CELL), nbformat.v4.new_code_cell(STEPPER_CELL)],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, workdir / "notebooks" / "widgets_check.ipynb")
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
        page.set_viewport_size({"width": 1200, "height": 1100})
        try:
            check_notebook(page, services["lab"], expected)
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
    page.wait_for_function(KERNEL_READY, timeout=60_000)  # else run-all finds no kernel
    # Fire and forget: the command's promise settles only when every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    view = page.locator(".jp-Cell").nth(0).locator(".paged-kv-grid [data-block-id]")
    stepper = page.locator(".paged-kv-stepper [data-block-id]")
    view.first.wait_for(state="attached", timeout=60_000)
    stepper.first.wait_for(state="attached", timeout=60_000)
    assert view.evaluate_all(states) == expected["view"]
    assert stepper.evaluate_all(states) == expected["stepper"][0]
    assert page.locator(".jp-Cell").nth(0).get_by_text("page 3 · releasable").count() == 1
    assert "step 0/" in page.locator(".paged-kv-stepper").inner_text()

    page.locator(".paged-kv-stepper button", has_text="step ▶").click()
    # The caption and the grid are separate widgets: wait until both have redrawn.
    page.wait_for_function(
        """want => [...document.querySelectorAll('.paged-kv-stepper [data-block-id]')]
            .map(e => e.dataset.state).join() === want""",
        arg=",".join(expected["stepper"][1]),
        timeout=30_000,
    )
    assert stepper.evaluate_all(states) == expected["stepper"][1]
    assert f"step 1/{expected['steps']}" in page.locator(".paged-kv-stepper").inner_text()

    body = page.inner_text("body")
    assert "Error displaying widget" not in body and "Traceback" not in body
    assert page.locator('[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "widgets_in_jupyterlab.png"), full_page=True)
