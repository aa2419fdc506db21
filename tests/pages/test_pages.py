"""The browser pages of `wna16 serve` (GET / and /stats) in headless Chromium
driven by Selenium, against the fixture demo model (random weights, so its
replies are random tokens). Checks: no console errors, a reply streams in
over several steps, Stop frees the sequence, model and user text are shown
as text (a stubbed fetch feeds the page's own stream reader an HTML payload),
/stats shows a running request, --api-key is asked for and sent, and no page
makes a request outside the server (the browser's performance log).
Screenshots of both pages, desktop and a 390-pixel phone, go to
$WNA16_ARTIFACTS (default build/test-artifacts)."""
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
from test_serve import CLI, KEY, SRC, Server  # noqa: E402

ART = os.environ.get("WNA16_ARTIFACTS", os.path.join(SRC, "build", "test-artifacts"))
PAYLOAD = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    import subprocess
    d = tmp_path_factory.mktemp("demo")
    subprocess.run([CLI, "synth", "--out", str(d), "--preset", "demo", "--tokenizer",
                    os.path.join(SRC, "tests/data/tokenizer/qwen3")], check=True,
                   capture_output=True)
    return str(d)


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def keyed(model_dir):
    s = Server(model_dir, "--api-key", KEY)
    yield s
    assert s.stop() == 0


class Browser:
    """One headless Chromium; every request and console message it sees is
    kept, so the tests can check them all at the end."""

    def __init__(self):
        o = Options()
        o.binary_location = shutil.which("chromium")
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                  "--force-color-profile=srgb", "--window-size=1280,820"):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.d = webdriver.Chrome(options=o, service=Service(shutil.which("chromedriver")))
        self.d.execute_cdp_cmd("Browser.grantPermissions",
                               {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        self.urls, self.console = [], []
        # A 1280x820 page: the window less what the browser's frame takes.
        self.d.get("data:text/html,")
        inner = self.d.execute_script("return window.innerHeight")
        self.d.set_window_size(1280, 820 + 820 - inner)

    def viewport(self, width, height, scale, mobile):
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": height, "deviceScaleFactor": scale,
                                "mobile": mobile})

    def phone(self):
        self.viewport(390, 844, 2, True)

    def logs(self):
        for e in self.d.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m["method"] == "Network.requestWillBeSent":
                self.urls.append(m["params"]["request"]["url"])
        self.console += self.d.get_log("browser")

    def errors(self, allow=()):
        self.logs()
        return [c for c in self.console if c["level"] in ("SEVERE", "WARNING")
                and not any(a in c["message"] for a in allow)]

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def wait(self, what, cond, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            v = cond()
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError("timed out waiting for " + what)

    def shot(self, name):
        os.makedirs(ART, exist_ok=True)
        self.d.save_screenshot(os.path.join(ART, name))

    def close(self, server_url):
        self.logs()
        outside = [u for u in self.urls if not u.startswith(server_url + "/")
                   and not u.startswith("data:")]
        self.d.quit()
        assert not outside, outside


def metrics(server, key=None):
    return server.metrics(key)


def last_reply(b):
    return b.js("const c = document.querySelectorAll('.msg.assistant .content');"
                "return c.length ? c[c.length - 1].textContent : null;")


def last_meta(b):
    return b.js("const m = document.querySelectorAll('.msg.assistant .meta');"
                "return m.length ? m[m.length - 1].textContent : '';")


def replying(b):
    return b.js("return !!document.querySelector('.msg.pending');")


def set_field(b, id_, value):
    b.js("document.getElementById(arguments[0]).value = arguments[1];", id_, str(value))


# Records the length of the reply each time the page changes it: proof that
# it grows in steps, whatever the polling rate here.
WATCH = """
window.__steps = [];
new MutationObserver(() => {
  const c = document.querySelectorAll('.msg.assistant .content');
  if (!c.length) return;
  const n = c[c.length - 1].textContent.length, s = window.__steps;
  if (n && s[s.length - 1] !== n) s.push(n);
}).observe(document.getElementById('thread'), {subtree: true, childList: true, characterData: true});
"""

# Replaces fetch for the chat endpoint with a stream of server-sent events
# split mid-event, so the page's own reader and renderer handle them.
STUB = """
const events = arguments[0];
window.__alerted = false;
window.alert = () => { window.__alerted = true; };
const real = window.fetch;
window.fetch = (url, init) => {
  if (!String(url).endsWith('/v1/chat/completions')) return real(url, init);
  const enc = new TextEncoder();
  const body = new ReadableStream({
    async start(ctl) {
      for (const e of events) {
        ctl.enqueue(enc.encode(e));
        await new Promise((r) => setTimeout(r, 30));
      }
      ctl.close();
    }
  });
  return Promise.resolve(new Response(body, {headers: {'Content-Type': 'text/event-stream'}}));
};
"""


def sse(pieces, usage=True):
    out = []
    for p in pieces:
        out.append("data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]})
                   + "\n\n")
    if usage:
        out.append("data: " + json.dumps({"choices": [], "usage": {"completion_tokens":
                                                                   len(pieces)}}) + "\n\n")
    out.append("data: [DONE]\n\n")
    # Cut every event in two, so events arrive split across reads.
    return [half for e in out for half in (e[:len(e) // 2], e[len(e) // 2:])]


def send(b, text):
    box = b.d.find_element(By.ID, "prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def test_headers(server, keyed):
    for path in ("/", "/stats"):
        with urllib.request.urlopen(server.url + path, timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/html")
            csp = r.headers["Content-Security-Policy"]
            assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
            assert "unsafe-inline" not in csp and "http" not in csp
            assert r.headers["X-Content-Type-Options"] == "nosniff"
        # The pages are public even with --api-key: they ask for it.
        with urllib.request.urlopen(keyed.url + path, timeout=10) as r:
            assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(keyed.url + "/metrics", timeout=10)
    assert e.value.code == 401


def test_chat_streams_stops_and_stats(server):
    b = Browser()
    try:
        b.d.get(server.url + "/")
        b.wait("the model name", lambda: b.d.find_element(By.ID, "model").text == "demo")
        assert not b.errors()

        # Shift+Enter is a newline, not a send.
        box = b.d.find_element(By.ID, "prompt")
        box.send_keys("Hello")
        ActionChains(b.d).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        assert box.get_attribute("value") == "Hello\n" and last_reply(b) is None

        # Enter sends; the reply grows in steps; tokens/s and TTFT under it.
        set_field(b, "max-tokens", 24)
        b.js(WATCH)
        box.send_keys("there")
        box.send_keys(Keys.ENTER)
        b.wait("the reply", lambda: not replying(b) and last_reply(b))
        steps = b.js("return window.__steps;")
        assert len(steps) >= 3 and steps == sorted(steps), steps
        assert re.search(r"\d+ tokens · [0-9.]+ tokens/s · first token \d+ ms", last_meta(b)), \
            last_meta(b)
        user = b.d.find_elements(By.CSS_SELECTOR, ".msg.user .content")
        assert user[0].text == "Hello\nthere"
        b.shot("chat-desktop-live.png")

        # A long reply: /stats in another tab shows it running, Stop ends it
        # and the server frees its sequence.
        before = metrics(server)
        set_field(b, "max-tokens", 4000)
        send(b, "Tell me a long story")
        b.wait("a long reply", lambda: len(last_reply(b) or "") > 20)
        chat = b.d.current_window_handle
        b.d.switch_to.new_window("tab")
        b.d.get(server.url + "/stats")
        b.wait("a running request on /stats",
               lambda: b.d.find_element(By.ID, "running").text == "1", timeout=15)
        time.sleep(10)  # some seconds of tokens/s in the chart
        assert b.d.find_element(By.ID, "kv").text.split()[0] != "0"
        assert b.d.find_element(By.ID, "tps").text not in ("–", "0")
        assert "ms" in b.d.find_element(By.ID, "itl-p50").text
        b.shot("stats-desktop.png")
        b.d.switch_to.window(chat)
        assert replying(b) and metrics(server)["num_requests_running"] == 1
        b.d.find_element(By.ID, "stop").click()
        b.wait("the reply to stop", lambda: not replying(b))
        assert "stopped" in last_meta(b)
        assert b.d.find_element(By.ID, "send").is_displayed()
        b.wait("the sequence freed", lambda: (lambda m: m["num_requests_running"] == 0 and
                                              m["kv_cache_blocks_used"] == 0 and
                                              m["request_aborted_total"] ==
                                              before["request_aborted_total"] + 1)
               (metrics(server)), timeout=10)
        stopped = last_reply(b)
        time.sleep(0.5)
        assert last_reply(b) == stopped

        # New chat empties the page and the history.
        b.d.find_element(By.ID, "new").click()
        assert not b.d.find_elements(By.CSS_SELECTOR, ".msg")
        assert b.d.find_element(By.ID, "empty").is_displayed()
        assert not b.errors()
    finally:
        b.close(server.url)


def test_text_never_html(server):
    b = Browser()
    try:
        b.d.get(server.url + "/")
        # The user's text, sent to the real server and shown in the thread.
        set_field(b, "max-tokens", 4)
        send(b, PAYLOAD)
        b.wait("the reply", lambda: not replying(b) and last_reply(b))
        assert b.d.find_element(By.CSS_SELECTOR, ".msg.user .content").text == PAYLOAD
        # A reply carrying HTML, in prose and in a code block, through the
        # page's own stream reader and renderer.
        reply = ["Look: ", PAYLOAD[:9], PAYLOAD[9:], "\n\n```html\n", PAYLOAD,
                 "\n<script>alert(2)</script>\n", "```\n\nDone."]
        b.js(STUB, sse(reply))
        send(b, "show me")
        b.wait("the stubbed reply", lambda: not replying(b) and "Done." in (last_reply(b) or ""))
        assert b.js("return document.querySelectorAll('#thread img, #thread script').length") == 0
        assert b.js("return window.__alerted") is False
        msg = b.d.find_elements(By.CSS_SELECTOR, ".msg.assistant .content")[-1]
        assert "Look: " + PAYLOAD in msg.text
        assert msg.find_element(By.CSS_SELECTOR, "p").text == "Look: " + PAYLOAD
        code = msg.find_element(By.CSS_SELECTOR, ".codebox code")
        assert code.text == PAYLOAD + "\n<script>alert(2)</script>"
        assert msg.find_element(By.CSS_SELECTOR, ".codehead span").text == "html"
        assert re.match(r"7 tokens · [0-9.]+ tokens/s", last_meta(b)), last_meta(b)
        # The copy button copies the code, not its HTML.
        msg.find_element(By.CSS_SELECTOR, ".codehead button").click()
        b.wait("Copied", lambda: msg.find_element(By.CSS_SELECTOR, ".codehead button").text
               == "Copied", timeout=5)
        copied = b.d.execute_async_script(
            "navigator.clipboard.readText().then(arguments[0], () => arguments[0](null));")
        assert copied == code.text
        b.logs()
        assert not [u for u in b.urls if u.endswith("/x")]  # the <img> never loaded
        assert not b.errors()
    finally:
        b.close(server.url)


SCRIPTED = ["Here is a small C function that adds two numbers:", "\n\n```c\n",
            "int add(int a, int b) {\n", "    return a + b;\n", "}\n", "```\n\n",
            "Call it as `add(2, 3)`; it returns 5."]


def screenshots(b, url, suffix):
    """The chat page with a scripted reply (the demo model's are random tokens)
    and the stats page, for the README and the CI logs."""
    b.d.get(url + "/")
    set_field(b, "system", "You are a concise assistant.")
    b.js(STUB, sse(SCRIPTED))
    send(b, "Write a C function that adds two ints.")
    b.wait("the scripted reply", lambda: not replying(b) and "returns 5" in last_reply(b))
    inline = b.d.find_elements(By.CSS_SELECTOR, ".msg.assistant code.inline")
    assert [c.text for c in inline] == ["add(2, 3)"]
    b.js("document.activeElement.blur();")
    b.shot(f"chat-{suffix}.png")
    b.d.get(url + "/stats")
    b.wait("the stats", lambda: b.d.find_element(By.ID, "running").text != "–")
    time.sleep(2.5)
    b.shot(f"stats-{suffix}.png")


def test_phone_and_screenshots(server):
    b = Browser()
    try:
        screenshots(b, server.url, "desktop-scripted")
        b.phone()
        screenshots(b, server.url, "phone")
        # Nothing wider than the phone; the settings slide in on demand.
        assert b.js("return document.documentElement.scrollWidth") <= 390
        b.d.get(server.url + "/")
        assert not b.d.find_element(By.ID, "system").is_displayed() or \
            b.js("return document.getElementById('settings').getBoundingClientRect().left") >= 390
        b.d.find_element(By.ID, "settings-toggle").click()
        b.wait("the settings", lambda: b.js(
            "return document.getElementById('settings').getBoundingClientRect().right") <= 391)
        time.sleep(0.3)
        b.shot("chat-phone-settings.png")
        b.d.find_element(By.ID, "settings-done").click()
        b.wait("the settings to close", lambda: b.js(
            "return document.getElementById('settings').getBoundingClientRect().left") >= 390)
        assert b.js("return document.documentElement.scrollWidth") <= 390
        assert not b.errors()
    finally:
        b.close(server.url)


def test_api_key(keyed):
    b = Browser()
    refused = ("status of 401",)  # the console's note on the first, keyless tries
    try:
        b.d.get(keyed.url + "/stats")
        b.wait("the key bar", lambda: b.d.find_element(By.ID, "keybar").is_displayed())
        b.d.find_element(By.ID, "key").send_keys(KEY + Keys.ENTER)
        b.wait("metrics with the key", lambda: b.d.find_element(By.ID, "running").text == "0")
        # The key is kept: the chat page does not ask again.
        b.d.get(keyed.url + "/")
        b.wait("the model name", lambda: b.d.find_element(By.ID, "model").text == "demo")
        assert not b.d.find_element(By.ID, "keybar").is_displayed()
        # Without it the chat page asks, then sends it with the request.
        b.js("localStorage.clear();")
        b.d.refresh()
        b.wait("the key bar", lambda: b.d.find_element(By.ID, "keybar").is_displayed())
        b.d.find_element(By.ID, "key").send_keys(KEY + Keys.ENTER)
        b.wait("the model name", lambda: b.d.find_element(By.ID, "model").text == "demo")
        set_field(b, "max-tokens", 3)
        send(b, "Hi")
        b.wait("the reply", lambda: not replying(b) and last_reply(b))
        assert "tokens" in last_meta(b) and "Error" not in last_meta(b), last_meta(b)
        assert not b.errors(allow=refused)
    finally:
        b.close(keyed.url)
