"""The demo page in a real headless Chromium (Debian's ``chromium``, driven by Playwright): one test per head on a tiny
saved folder: load the page, type an input, submit, check the answer (and the heat map) on the page. Screenshots are
kept in each test's tmp folder. ``make test-browser`` installs Chromium and the extras and runs this file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("HF_SEQ_CHROMIUM", "/usr/bin/chromium"))
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.is_file(), reason=f"no Chromium at {CHROMIUM} (make test-browser installs it)"),
]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before Gradio is imported: no usage statistics
gradio = pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")

from demo_folders import free_port, save_tiny_folder  # noqa: E402

from hf_seq.toolkit.demo import Demo, build_page  # noqa: E402

# Chromium without a GPU, a sandbox (root in a container) or any of its own network traffic
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return tmp_path_factory.mktemp("demo_folders")


@pytest.fixture
def open_page(browser, folders, tmp_path):
    """``open_page(name)``: the page of tiny folder ``name`` served on a free port, opened in a new browser tab."""
    served, requested = [], []

    def open_(name: str):
        demo = Demo(save_tiny_folder(name, folders))
        app = build_page(demo)
        port = free_port()
        app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        tab = browser.new_page(viewport={"width": 1200, "height": 1400})
        tab.set_default_timeout(TIMEOUT_MS)
        tab.on("request", lambda request: requested.append(request.url))
        served.append((app, tab))
        tab.goto(f"http://127.0.0.1:{port}/")
        tab.locator("#served-model").wait_for()
        return demo, tab

    yield open_
    for app, tab in served:
        tab.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        tab.close()
        app.close()
    # the page loads everything from its own server: no font, script or statistics from elsewhere
    assert requested and not [url for url in requested if not url.startswith(("http://127.0.0.1:", "data:", "blob:"))]


def submit(tab, text: str) -> None:
    tab.locator("#input-text textarea").fill(text)
    tab.locator("#submit").click()


def test_classifier_page(open_page):
    demo, tab = open_page("classifier")
    assert demo.title in tab.locator("#served-model").inner_text()
    submit(tab, "a cat sat on the mat")
    best = max(demo.classify("a cat sat on the mat").items(), key=lambda kv: kv[1])[0]
    tab.locator("#output").get_by_text(best).first.wait_for()
    for label in ("negative", "neutral", "positive"):
        assert label in tab.locator("#output").inner_text()


def test_tagger_page(open_page):
    demo, tab = open_page("tagger")
    submit(tab, "the cat sat on the mat .")
    output = tab.locator("#output")
    output.get_by_text("mat").first.wait_for()
    tags = {tag for _, tag in demo.tag("the cat sat on the mat .") if tag}
    text = output.inner_text()
    assert tags and all(tag in text for tag in tags)


def test_language_model_page(open_page):
    demo, tab = open_page("lm")
    expected = demo.generate("the cat", 60, True, 1.0, 0, 1.0, 3, 0)
    submit(tab, "the cat")
    for i, sample in enumerate(expected):
        box = tab.locator(f"#sample-{i} textarea")
        playwright.expect(box).to_have_value(sample, timeout=TIMEOUT_MS)


def translate_and_check(demo, tab, tmp_path, name: str) -> None:
    best = demo.translate("let there be light", 4)[0][0]
    submit(tab, "let there be light")
    playwright.expect(tab.locator("#output textarea")).to_have_value(best, timeout=TIMEOUT_MS)
    assert "let there be light" in tab.locator("#nbest").inner_text()
    heatmap = tab.locator("#heatmap img")
    heatmap.wait_for()
    assert heatmap.evaluate("img => img.complete && img.naturalWidth > 100")
    tab.locator("#heatmap").screenshot(path=str(tmp_path / f"{name}_heatmap.png"))


def test_rnn_translator_page(open_page, tmp_path):
    demo, tab = open_page("rnn_translator")
    translate_and_check(demo, tab, tmp_path, "rnn")


def test_transformer_translator_page(open_page, tmp_path):
    demo, tab = open_page("transformer_translator")
    translate_and_check(demo, tab, tmp_path, "transformer")
    averaged = tab.locator("#heatmap img").get_attribute("src")
    tab.locator("#attention-head input").click()  # one head instead of the average: a new heat map
    tab.get_by_role("option", name="2", exact=True).click()
    playwright.expect(tab.locator("#heatmap img")).not_to_have_attribute("src", averaged, timeout=TIMEOUT_MS)
    tab.locator("#heatmap").screenshot(path=str(tmp_path / "transformer_head2_heatmap.png"))


def test_masked_lm_page_and_a_missing_mask(open_page):
    demo, tab = open_page("bert_mlm")
    submit(tab, "the cat sat on the mat")  # no [MASK]: a message on the page, no traceback
    tab.get_by_text("Put the mask token [MASK]").first.wait_for()
    assert "Traceback" not in tab.content()
    submit(tab, "the [MASK] sat on the mat")
    top = demo.fill_mask("the [MASK] sat on the mat", 5)[0][0]
    tab.locator("#output").get_by_text(top).first.wait_for()
