"""The explorer in a real browser. JupyterLab serves copies of notebooks/explore.ipynb and of one executed notebook
from a tmp folder (its autosave never writes over the repository's files); headless Chromium, Debian's `chromium`
package driven by playwright (no browser download), runs every cell of the explorer, sees its code collapsed, moves
the α slider and sees the first plot redrawn with no error, then opens the executed notebook and sees its figures.

Screenshots (the explorer before and after α moves, the executed notebook) go to $SPECREPRO_SCREENSHOTS, else to
the test's tmp folder. Without chromium or playwright the test is skipped with what to install, never passed.
Alone: .venv/bin/python -m pytest tests/test_browser.py -s"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPLORER = ROOT / "notebooks" / "explore.ipynb"
EXECUTED = ROOT / "notebooks" / "executed" / "theory_moe.ipynb"

# Generous but bounded (the whole test takes 25-45 s on 2 cores): seconds for
START_S = 90  # JupyterLab to answer
OPEN_S = 90  # a notebook to open and its kernel to be idle
RUN_ALL_S = 240  # every explorer cell to run and the widgets to show
REDRAW_S = 60  # the first plot to be redrawn after α moves
FIGURES_S = 60  # the executed notebook's figures to be decoded
STOP_S = 30  # JupyterLab to shut its kernels down and exit

# The test server's own user settings: every cell attached to the page (the default, content-visibility, may leave
# an off-screen figure undecoded) and no news or update checks (CI may have no network).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}

ALPHA = ".specrepro-alpha"
# ipywidgets 8 puts the class on the <img> itself; a wrapper holding the <img> would do as well.
PLOT = "img.specrepro-plot, .specrepro-plot img"

# JavaScript run in the page. JupyterLab is started with expose_app_in_browser, so window.jupyterapp is its app.
CURRENT = "window.jupyterapp && window.jupyterapp.shell.currentWidget"
KERNEL_IDLE = f"""() => {{
  const kernel = ({CURRENT})?.sessionContext?.session?.kernel;
  return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
}}"""
# Every code cell of the current notebook has an execution count and none is queued or running ([*]).
ALL_RUN = f"""() => {{
  const cells = ({CURRENT}).content.widgets.filter(cell => cell.model.type === 'code');
  return cells.every(cell => cell.model.executionCount !== null
                             && !cell.node.querySelector('.jp-InputPrompt').innerText.includes('*'));
}}"""
# Every code cell of the current notebook shows its input collapsed.
CODE_HIDDEN = f"""() => {{
  const cells = ({CURRENT}).content.widgets.filter(cell => cell.model.type === 'code');
  return cells.length > 0 && cells.every(cell => cell.inputHidden);
}}"""
# Error outputs in the current notebook's cells ("ename: evalue"), and the explorer's own messages for errors raised
# inside widget callbacks (.specrepro-error with text).
ERRORS = f"""() => {{
  const found = [];
  for (const cell of ({CURRENT})?.content?.widgets ?? []) {{
    const outputs = cell.model.outputs;
    for (let i = 0; outputs && i < outputs.length; i++) {{
      const output = outputs.get(i).toJSON();
      if (output.output_type === 'error') found.push(`${{output.ename}}: ${{output.evalue}}`);
    }}
  }}
  for (const node of document.querySelectorAll('.specrepro-error')) {{
    if (node.innerText.trim()) found.push(node.innerText.trim());
  }}
  return found;
}}"""
PLOT_SHOWN = f"""() => {{
  const img = document.querySelector('{PLOT}');
  return !!img && !!img.src && img.complete && img.naturalWidth > 0;
}}"""
PLOT_CHANGED = f"""(before) => {{
  const img = document.querySelector('{PLOT}');
  return !!img && img.src !== before && img.complete && img.naturalWidth > 0;
}}"""
# The current notebook's figures: (number of <img> in output areas, number of them decoded).
FIGURES = f"""() => {{
  const images = [...({CURRENT}).node.querySelectorAll('.jp-OutputArea-output img')];
  return [images.length, images.filter(img => img.complete && img.naturalWidth > 0).length];
}}"""


@dataclass
class Lab:
    url: str  # http://127.0.0.1:<port>
    token: str
    log: Path  # the server's stdout and stderr
    start_s: float  # seconds it took to answer


@pytest.fixture
def chromium():
    """Debian's chromium and playwright's Python API, or a skip that says what to install."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("chromium not found: install Debian's package (apt-get install chromium) for the browser test")
    pytest.importorskip("playwright.sync_api",
                        reason="playwright not installed: pip install -e '.[test]' (no `playwright install` needed)")
    return executable


@pytest.fixture
def lab(chromium, tmp_path):
    """A JupyterLab server on a free local port with a token, serving copies of the two notebooks; shut down after the
    test whatever its outcome. It asks for `chromium` so that a missing browser skips before a server starts."""
    root = tmp_path / "root"
    root.mkdir()
    for notebook in (EXPLORER, EXECUTED):
        assert notebook.exists(), f"{notebook.relative_to(ROOT)} is missing"
        shutil.copy(notebook, root / notebook.name)
    settings = tmp_path / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
               "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        command.append("--allow-root")  # containers often run as root; jupyter refuses it otherwise
    # Its own config and runtime folders, so that a user's jupyter config (a password, say) does not apply.
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    log = tmp_path / "lab.log"
    started = time.perf_counter()
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_answering(server, url, token, log)
        yield Lab(url, token, log, time.perf_counter() - started)
    finally:
        _shut_down(server, url, token)


def test_the_explorer_runs_and_redraws_in_chromium_and_the_executed_notebook_shows_its_figures(chromium, lab,
                                                                                               tmp_path):
    from playwright.sync_api import sync_playwright

    started = time.perf_counter()
    shots = Path(os.environ.get("SPECREPRO_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    times = {"JupyterLab start": lab.start_s}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = None
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.set_default_timeout(60_000)

            # 1. Open the explorer and run all its cells from the Run menu; wait for the widgets and an idle kernel.
            mark = time.perf_counter()
            page = context.new_page()
            _open(page, lab, EXPLORER.name)
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            _wait(page, PLOT_SHOWN, RUN_ALL_S, "the explorer's first plot (.specrepro-plot) to show after Run All")
            page.locator(ALPHA).wait_for(state="visible", timeout=RUN_ALL_S * 1000)
            _wait(page, ALL_RUN, RUN_ALL_S, "every explorer cell to have run")
            _wait(page, KERNEL_IDLE, RUN_ALL_S, "the kernel to be idle after Run All")
            times["run all"] = time.perf_counter() - mark
            # The explorer opens on its controls: every code cell's input is collapsed by the notebook's own
            # metadata (jupyter.source_hidden), not by a command here. The file browser closed, so that the
            # screenshots show the controls above the plot.
            assert page.evaluate(CODE_HIDDEN), "a code cell of the explorer opened with its code shown"
            page.evaluate("window.jupyterapp.shell.collapseLeft()")
            _screenshot(page, ALPHA, shots / "explorer-before.png")
            plot = page.locator(PLOT).first

            # 2. Move α three steps with the keyboard (ipywidgets 8 sliders are noUiSlider, whose handle takes arrow
            # keys), rightwards unless it sits at its maximum, and wait for the first plot to be redrawn.
            mark = time.perf_counter()
            before = plot.get_attribute("src")
            handle = page.locator(f"{ALPHA} .noUi-handle").first
            value, high = (float(handle.get_attribute(a)) for a in ("aria-valuenow", "aria-valuemax"))
            readout = page.locator(f"{ALPHA} .widget-readout").first.inner_text()
            handle.focus()
            for _ in range(3):
                page.keyboard.press("ArrowLeft" if value >= high else "ArrowRight")
            _wait(page, f"() => document.querySelector('{ALPHA} .widget-readout').innerText !== {readout!r}", 10,
                  f"the α readout to move from {readout} after three arrow keys")
            _wait(page, PLOT_CHANGED, REDRAW_S, "the first plot to be redrawn after α moved", arg=before)
            _wait(page, KERNEL_IDLE, REDRAW_S, "the kernel to be idle after the redraw")
            times["redraw"] = time.perf_counter() - mark
            _screenshot(page, ALPHA, shots / "explorer-after.png")
            page.close()

            # 3. The executed notebook, in a fresh workspace: its figures are shown.
            mark = time.perf_counter()
            page = context.new_page()
            _open(page, lab, EXECUTED.name, workspace="executed")
            _wait(page, f"() => ({FIGURES})()[0] > 0 && ({FIGURES})()[0] === ({FIGURES})()[1]", FIGURES_S,
                  f"the figures of {EXECUTED.name} (<img> in output areas; a notebook executed before Artifacts "
                  f"showed its figures inline has none) to be shown")
            shown, _ = page.evaluate(FIGURES)
            assert shown >= 1
            _screenshot(page, ".jp-OutputArea-output img", shots / f"executed-{EXECUTED.stem}.png")
            times["executed notebook"] = time.perf_counter() - mark
        except BaseException:
            if page is not None and not page.is_closed():
                page.screenshot(path=shots / "failure.png")
            raise
        finally:
            browser.close()
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in times.items())
    print(f"\ntest_browser: {time.perf_counter() - started + lab.start_s:.1f} s ({phases}; {shown} figures in "
          f"{EXECUTED.name}); screenshots in {shots}")


def _open(page, lab, name, workspace=None):
    """Open a notebook of the server's root folder and wait until its kernel is idle. A named workspace starts from
    an empty layout (the default one would also restore the notebooks opened before)."""
    where = f"/lab/workspaces/{workspace}/tree/{name}" if workspace else f"/lab/tree/{name}"
    page.goto(f"{lab.url}{where}?token={lab.token}")
    _wait(page, f"() => ({CURRENT})?.context?.path === {name!r}", OPEN_S, f"{name} to open")
    _wait(page, KERNEL_IDLE, OPEN_S, f"the kernel of {name} to be idle")


def _wait(page, js, timeout_s, what, arg=None):
    """Wait for a JavaScript predicate, or fail: at once when an error shows (Run All stops at a failing cell, and
    the predicate would never hold), else after timeout_s."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(f"(arg) => ({ERRORS})().length > 0 || ({js})(arg)", arg=arg,
                               timeout=timeout_s * 1000, polling=250)
        timed_out = False
    except PlaywrightTimeout:
        timed_out = True  # failed below, out of the except block, so that the report is not playwright's traceback
    if timed_out:
        pytest.fail(f"waited {timeout_s} s for {what}; no error shown")
    errors = _errors(page)
    if errors:
        pytest.fail(f"an error showed while waiting for {what}:\n" + "\n".join(errors))


def _screenshot(page, selector, path):
    """The page with the first element matching selector scrolled to the top of the notebook."""
    page.locator(selector).first.evaluate("node => node.scrollIntoView({block: 'start'})")
    page.screenshot(path=path)


def _errors(page):
    return page.evaluate(ERRORS)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_answering(server, url, token, log):
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(_request(f"{url}/api/status", token), timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer on {url} within {START_S} s:\n{_tail(log)}")


def _shut_down(server, url, token):
    """Ask the server to shut its kernels down and exit; kill it if it has not within STOP_S (its kernels, in
    sessions of their own, then exit by themselves: ipykernel watches its parent)."""
    if server.poll() is None:
        try:
            urllib.request.urlopen(_request(f"{url}/api/shutdown", token, method="POST"), timeout=10).close()
        except OSError:
            pass
    try:
        server.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=STOP_S)


def _request(url, token, method="GET"):
    return urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})


def _tail(log, lines=40):
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
