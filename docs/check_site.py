r"""Look at every page of the built documentation site in a real, headless Chromium.

Build the site first, then run this script on it::

    mkdocs build --strict
    python docs/check_site.py site /tmp/site-shots

It serves ``site/`` on localhost, opens each HTML page in Chromium (Debian's package,
``/usr/bin/chromium``, driven by Playwright: ``pip install playwright``; no browser download is
needed) and reports, one line a page:

- images that did not load (``naturalWidth`` 0) and any request that failed or answered >= 400;
- links to this site that lead to no page, or to a ``#fragment`` no element of that page has;
- formulas not rendered: ``$$``, ``\(`` or ``\[`` left in the text, an ``arithmatex`` wrapper
  the build hook did not replace, a MathML ``merror``, a ``<math>`` element that takes no space,
  or a LaTeX command (a backslash) left inside one;
- code blocks and tables: how many, and any that is empty or has no size;
- errors the page logged in the console.

It saves a full-page screenshot of each page to the folder given (``index.png``,
``api.png``, ``coming-from-allrank.png``, ...) and exits with 1 if anything is broken.
It is a tool for a person looking at the site; CI does not run it.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag, urlsplit

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Run in the page: what it shows, in plain data.
INSPECT = r"""
() => {
  const skip = new Set(["PRE", "CODE", "SCRIPT", "STYLE", "MATH", "TEXTAREA", "KBD"]);
  const rawMath = [];
  const walker = document.createTreeWalker(
    document.querySelector("article") || document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let inside = false;
    for (let el = node.parentElement; el; el = el.parentElement) {
      if (skip.has(el.tagName.toUpperCase())) { inside = true; break; }
    }
    const text = node.textContent;
    if (!inside && /\$\$|\\\(|\\\[|\$[^$\s][^$]*\\[a-zA-Z]+[^$]*\$/.test(text)) {
      rawMath.push(text.trim().slice(0, 80));
    }
  }
  const maths = [...document.querySelectorAll("article math")];
  const sized = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const visible = (el) => el.closest("details:not([open])") === null;
  return {
    title: document.title,
    ids: [...document.querySelectorAll("[id]")].map((el) => el.id),
    links: [...document.querySelectorAll("a[href]")].map((a) => a.href),
    images: [...document.querySelectorAll("img")].map((img) => ({
      src: img.currentSrc || img.src, width: img.naturalWidth, complete: img.complete})),
    math: maths.length,
    mathBlocks: maths.filter((m) => m.getAttribute("display") === "block").length,
    mathUnsized: maths.filter((m) => visible(m) && !sized(m)).length,
    mathWithTex: maths.filter((m) => /\\[a-zA-Z]/.test(m.textContent)).map(
      (m) => m.textContent.slice(0, 60)),
    mathErrors: document.querySelectorAll("merror, mjx-merror, .katex-error").length,
    arithmatex: document.querySelectorAll(".arithmatex").length,
    rawMath: rawMath,
    code: document.querySelectorAll("article pre > code").length,
    codeEmpty: [...document.querySelectorAll("article pre > code")].filter(
      (c) => c.textContent.trim() === "" || (visible(c) && !sized(c))).length,
    tables: document.querySelectorAll("article table").length,
    tablesEmpty: [...document.querySelectorAll("article table")].filter(
      (t) => t.querySelectorAll("tbody tr").length === 0 || (visible(t) && !sized(t))).length,
  };
}
"""


def page_url(site: Path, page: Path, base: str) -> str:
    """The URL the server gives ``page`` (``a/index.html`` is ``a/``)."""
    rel = page.relative_to(site).as_posix()
    return base + (rel[: -len("index.html")] if rel.endswith("index.html") else rel)


def target_file(site: Path, path: str) -> Path | None:
    """The file of ``site`` a URL path below the site's resolves to, as the server resolves it."""
    local = site / unquote(path).lstrip("/")
    if local.is_dir():
        local = local / "index.html"
    return local if local.is_file() else None


def site_path(site: Path) -> str:
    """The path the site is published under (``site_url``'s, read from its sitemap), or ``/``."""
    sitemap = site / "sitemap.xml"
    found = (
        re.search(r"<loc>(.*?)</loc>", sitemap.read_text("utf-8")) if sitemap.is_file() else None
    )
    path = urlsplit(found[1]).path if found else "/"
    return path if path.endswith("/") else path + "/"


def serve(site: Path, prefix: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``site`` under ``prefix`` on a free localhost port, from a daemon thread."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path: str) -> str:
            # Outside the prefix nothing is found, as on the published site.
            inside = path.startswith(prefix)
            return super().translate_path("/" + path[len(prefix) :] if inside else "/\0")

        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Handler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}{prefix}"


def page_problems(info: dict[str, Any], failed: list[str], console: list[str]) -> list[str]:
    """What is broken on one page, from what it showed (links are checked afterwards)."""
    problems = [f"broken image {img['src']}" for img in info["images"] if img["width"] == 0]
    problems += [f"failed request {request}" for request in failed]
    problems += [f"console error: {message}" for message in console]
    problems += [f"raw math text: {text!r}" for text in info["rawMath"]]
    problems += [f"LaTeX left in MathML: {text!r}" for text in info["mathWithTex"]]
    for key, what in [
        ("mathErrors", "math errors"),
        ("mathUnsized", "formulas without size"),
        ("arithmatex", "unconverted arithmatex wrappers"),
        ("codeEmpty", "empty code blocks"),
        ("tablesEmpty", "empty tables"),
    ]:
        if info[key]:
            problems.append(f"{info[key]} {what}")
    return problems


def link_problems(links: list[str], base: str, site: Path, ids: dict[Path, set[str]]) -> list[str]:
    """Links to this site that lead nowhere: no such file, or no element with the fragment."""
    problems = []
    for link in sorted(set(links)):
        if not link.startswith(base):
            continue
        address, fragment = urldefrag(link)
        target = target_file(site, address[len(base) :])
        if target is None:
            problems.append(f"broken link {link[len(base) - 1 :]}")
        elif fragment and target.suffix == ".html" and unquote(fragment) not in ids.get(target, ()):
            problems.append(f"broken anchor {link[len(base) - 1 :]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Visit every page, print one line each (and its problems), save the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --strict)")
    parser.add_argument("screenshots", type=Path, help="folder for one PNG per page")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser to drive")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in pixels")
    args = parser.parse_args(argv)

    from playwright.sync_api import sync_playwright

    site = args.site.resolve()
    pages = sorted(site.rglob("*.html"))
    if not pages:
        print(f"no HTML pages under {site}: build the site first", file=sys.stderr)
        return 2
    args.screenshots.mkdir(parents=True, exist_ok=True)
    server, base = serve(site, site_path(site))
    origin = base[: base.index("/", len("http://"))]
    ids: dict[Path, set[str]] = {}
    links: dict[Path, list[str]] = {}
    problems: dict[Path, list[str]] = {}
    elsewhere: set[str] = set()
    summary: dict[Path, str] = {}
    try:
        with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=args.chromium,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": args.width, "height": 900},
            )
            tab = browser.new_page()
            failed: list[str] = []
            console: list[str] = []

            def on_failed(request: Any) -> None:
                if request.url.startswith(origin):
                    failed.append(f"{request.url} ({request.failure})")
                else:  # another host: this machine may be offline; a note, not a fault
                    elsewhere.add(urlsplit(request.url).netloc)

            def on_response(response: Any) -> None:
                if response.status >= 400 and response.url.startswith(origin):
                    failed.append(f"{response.url} ({response.status})")

            def on_console(message: Any) -> None:
                if message.type == "error" and message.location.get("url", "").startswith(origin):
                    console.append(message.text)

            tab.on("requestfailed", on_failed)
            tab.on("response", on_response)
            tab.on("console", on_console)
            for page in pages:
                failed.clear()
                console.clear()
                written = set(re.findall(r'\bid="([^"]+)"', page.read_text("utf-8")))
                for _ in range(3):  # a long page is sometimes shown cut short: load it again
                    tab.goto(page_url(site, page, base), wait_until="networkidle")
                    info = tab.evaluate(INSPECT)
                    if written <= set(info["ids"]):
                        break
                name = page.relative_to(site).with_suffix("").as_posix()
                name = name.removesuffix("/index").removesuffix("index") or "index"
                shot = args.screenshots / f"{name.replace('/', '-')}.png"
                tab.screenshot(path=shot, full_page=True)
                ids[page] = set(info["ids"])
                links[page] = info["links"]
                problems[page] = page_problems(info, list(failed), list(console))
                if missing := written - ids[page]:
                    problems[page].append(f"{len(missing)} ids of the HTML not in the page shown")
                summary[page] = (
                    f"{name}: {len(info['images'])} images, {len(info['links'])} links, "
                    f"{info['math']} formulas ({info['mathBlocks']} display), "
                    f"{info['code']} code blocks, {info['tables']} tables"
                )
            browser.close()
    finally:
        server.shutdown()
    broken = 0
    for page in pages:
        found = problems[page] + link_problems(links[page], base, site, ids)
        broken += len(found)
        print(("BROKEN " if found else "ok     ") + summary[page])
        for problem in found:
            print(f"         {problem}")
    if elsewhere:
        print(f"note: requests to other hosts that did not load: {', '.join(sorted(elsewhere))}")
    print(f"{len(pages)} pages, {broken} problems; screenshots in {args.screenshots}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
