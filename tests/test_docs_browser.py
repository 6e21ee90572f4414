"""The docs site, built from the notebooks and looked at in a real browser.

Builds the site with tools/build_docs.sh into a temporary folder, serves it from 127.0.0.1 and opens the
home page and every notebook page in headless Chromium (the Debian package), driven over the Chrome
DevTools protocol. Per page: no console errors or uncaught exceptions, no request leaves 127.0.0.1,
every <img> loaded, every navigation link answers 200, and a screenshot (the top 3000 px) is saved
(into $TIMMDATA_SCREENSHOTS if set, else a pytest temporary folder; the path is printed).

Chromium missing: the test installs it with apt-get when running as root, else fails with the command."""
import base64, functools, importlib.util, json, os, re, shutil, subprocess, sys, sysconfig, threading, time
import urllib.error, urllib.parse, urllib.request
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # make test-all: builds the whole site from the notebooks first (minutes on 2 cores)

ROOT = Path(__file__).resolve().parents[1]
INSTALL_CMD = 'apt-get update && apt-get install -y chromium'
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run',
         '--disable-component-update', '--disable-sync', '--disable-quic', '--disable-dev-shm-usage',
         '--hide-scrollbars', '--window-size=1280,900']


def _load_builder():
    spec = importlib.util.spec_from_file_location('timmdata_docs_build', ROOT / 'tools' / 'docs' / 'build.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

builder = _load_builder()
NBS = Path(os.environ.get('TIMMDATA_DOCS_NBS') or ROOT / 'nbs')  # another notebook folder, to try the test itself
NOTEBOOKS = builder.discover(NBS) if (NBS / 'index.ipynb').exists() else []
PAGES = [builder.page_name(nb, NBS) for nb in NOTEBOOKS]
# every page is built and checked as files in `make test` (test_every_page_shows_its_pictures_and_links: every picture
# and link of every page resolves); in the browser (seconds each on a busy 2-core machine) the default run opens four
# pages: the home page, two with saved plots and markdown pictures (streaming, loader) and one with several plots
# (mixup); the other pages with TIMMDATA_SLOW=1 (they share one template, one nav and the same scripts)
BROWSER_DEFAULT = ('index', 'streams/streaming', 'loader', 'mixup')
BROWSER_PAGES = [pytest.param(p, marks=() if p in BROWSER_DEFAULT else pytest.mark.slow) for p in PAGES]


def _env():
    "The venv that runs pytest first on PATH, as the Makefile does."
    return {**os.environ, 'PATH': str(Path(sys.executable).parent) + os.pathsep + os.environ.get('PATH', '')}


def build(outdir, *extra):
    # the docs build runs each notebook's import cells, the `hf` extra's (datasets) among them
    lacks = [m for m in ('mkdocs', 'material', 'nbdev', 'datasets') if importlib.util.find_spec(m) is None]
    if lacks and sysconfig.get_config_var('Py_GIL_DISABLED'):  # `make ft-test`: a group its venv could not install
        pytest.skip(f'the free-threaded venv lacks {", ".join(lacks)} (see .ft/left-out.txt): no docs build')
    return subprocess.run(['bash', str(ROOT / 'tools' / 'build_docs.sh'), str(outdir), *extra], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope='module')
def chromium():
    exe = shutil.which('chromium') or ('/usr/bin/chromium' if Path('/usr/bin/chromium').exists() else None)
    if exe: return exe
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        r = subprocess.run(['bash', '-c', INSTALL_CMD], capture_output=True, text=True, timeout=1200)
        exe = shutil.which('chromium') or '/usr/bin/chromium'
        if r.returncode != 0 or not Path(exe).exists():
            pytest.fail(f'installing Chromium failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}')
        return exe
    pytest.fail(f'Chromium (Debian package `chromium`) is missing; install it with:\n  sudo sh -c "{INSTALL_CMD}"')


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    if not NOTEBOOKS: pytest.fail(f'{NBS / "index.ipynb"} is missing: the docs site has no home page')
    out = tmp_path_factory.mktemp('docs') / 'site'
    t0 = time.time()
    r = build(out, '--nbs', str(NBS))
    assert r.returncode == 0, f'tools/build_docs.sh failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}'
    print(f'\nsite built in {time.time() - t0:.1f}s: {out}')
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


@pytest.fixture(scope='module')
def server(site):
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(_QuietHandler, directory=str(site)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f'http://127.0.0.1:{httpd.server_address[1]}/'
    httpd.shutdown(); httpd.server_close()


class CDP:
    "A minimal Chrome DevTools protocol client over one page target's websocket."
    def __init__(self, ws_url):
        import websocket  # websocket-client
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True, enable_multithread=True)
        self.next_id, self.events = 0, []

    def send(self, method, timeout=30, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({'id': mid, 'method': method, 'params': params}))
        end = time.time() + timeout
        while time.time() < end:
            msg = json.loads(self.ws.recv())
            if msg.get('id') == mid:
                if 'error' in msg: raise RuntimeError(f'{method}: {msg["error"]}')
                return msg.get('result', {})
            if 'method' in msg: self.events.append(msg)
        raise TimeoutError(method)

    def pump(self, seconds):
        "Collects events for `seconds`."
        end = time.time() + seconds
        self.ws.settimeout(0.1)
        try:
            while time.time() < end:
                try: msg = json.loads(self.ws.recv())
                except Exception as e:
                    if type(e).__name__ == 'WebSocketTimeoutException': continue
                    raise
                if 'method' in msg: self.events.append(msg)
        finally: self.ws.settimeout(30)

    def wait_event(self, name, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if any(e['method'] == name for e in self.events): return
            self.pump(0.1)
        raise TimeoutError(f'no {name} within {timeout}s')

    def js(self, expr):
        r = self.send('Runtime.evaluate', expression=expr, returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in r: raise RuntimeError(f'{expr}: {r["exceptionDetails"]}')
        return r['result'].get('value')

    def close(self): self.ws.close()


@pytest.fixture(scope='module')
def browser(chromium, tmp_path_factory):
    profile = tmp_path_factory.mktemp('chromium-profile')
    proc = subprocess.Popen([chromium, *FLAGS, f'--user-data-dir={profile}', '--remote-debugging-port=0', 'about:blank'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        port_file, end = profile / 'DevToolsActivePort', time.time() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.time() > end:
                err = proc.stderr.read().decode(errors='replace')[-3000:] if proc.poll() is not None else ''
                pytest.fail(f'Chromium did not open its DevTools port (exit {proc.poll()}):\n{err}')
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list', timeout=10))
        page = next(t for t in targets if t['type'] == 'page')
        cdp = CDP(page['webSocketDebuggerUrl'])
        for domain in ('Page', 'Runtime', 'Log', 'Network'): cdp.send(f'{domain}.enable')
        yield cdp
        cdp.close()
    finally:
        proc.terminate()
        try: proc.wait(10)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()


@pytest.fixture(scope='module')
def shots(tmp_path_factory):
    d = Path(os.environ['TIMMDATA_SCREENSHOTS']) if os.environ.get('TIMMDATA_SCREENSHOTS') else tmp_path_factory.mktemp('screenshots')
    d.mkdir(parents=True, exist_ok=True)
    print(f'\nscreenshots: {d}')
    return d


# ------------------------------------------------------------------ helpers

def problems(events):
    "Console errors, uncaught exceptions and browser log errors among CDP events."
    out = []
    for e in events:
        m, p = e['method'], e.get('params', {})
        if m == 'Runtime.consoleAPICalled' and p.get('type') in ('error', 'assert'):
            out.append('console.' + p['type'] + ': ' + ' '.join(str(a.get('value', a.get('description', ''))) for a in p.get('args', [])))
        elif m == 'Runtime.exceptionThrown':
            d = p.get('exceptionDetails', {})
            out.append('exception: ' + str(d.get('exception', {}).get('description') or d.get('text')))
        elif m == 'Log.entryAdded' and p.get('entry', {}).get('level') == 'error':
            en = p['entry']
            out.append(f"log {en.get('source')}: {en.get('text')} {en.get('url', '')}")
    return out


@functools.lru_cache(maxsize=None)  # a static site: each page answers once (every page links every other)
def status(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r: return r.status
    except urllib.error.HTTPError as e: return e.code


# ------------------------------------------------------------------ the tests

@pytest.mark.slow
def test_every_notebook_has_a_page(site):
    for nb, page in zip(NOTEBOOKS, PAGES, strict=True):
        assert (site / f'{page}.html').is_file(), f'{nb.name} has no page {page}.html in the site'
    assert (site / '.nojekyll').exists() and (site / 'search' / 'search_index.json').is_file()
    assert builder.remote_assets(site) == []


class _Refs(HTMLParser):
    "The pictures (img src) and links (a href) of a page."
    def __init__(self):
        super().__init__(); self.imgs, self.links = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'img' and a.get('src'): self.imgs.append(a['src'])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])


@pytest.mark.slow
def test_every_page_shows_its_pictures_and_links(site):
    "Every page of the site, as files: each picture is a file in the site, each link within the site leads to a file."
    if NOTEBOOKS and set(BROWSER_DEFAULT) - set(PAGES):
        pytest.fail(f'BROWSER_DEFAULT names pages the site does not have: {sorted(set(BROWSER_DEFAULT) - set(PAGES))}')
    n_imgs = 0
    for page in PAGES:
        refs = _Refs(); refs.feed((site / f'{page}.html').read_text(encoding='utf-8'))
        for src in refs.imgs:
            if src.startswith('data:'): continue
            f = ((site / page).parent / urllib.parse.unquote(src.split('#')[0].split('?')[0])).resolve()  # from the page's folder
            assert f.is_file() and f.stat().st_size > 0, f'{page}.html: picture {src} is not a file of the site'
            n_imgs += 1
        for href in refs.links:
            if href.startswith(('#', 'mailto:', 'http://', 'https://', 'javascript:')): continue
            target = ((site / page).parent / urllib.parse.unquote(href.split('#')[0].split('?')[0])).resolve()
            assert target.is_file() or (target / 'index.html').is_file(), f'{page}.html: link {href} leads nowhere'
    assert n_imgs >= sum('image/png' in nb.read_text(encoding='utf-8') for nb in NOTEBOOKS), 'pictures missing from the pages'


@functools.lru_cache(maxsize=4)
def _linked_from(site: Path, pages: frozenset) -> frozenset:
    "The site's pages (paths from its root) that `pages` (paths from its root) link to."
    out = set()
    for rel in pages:
        if not (site / rel).is_file(): continue
        refs = _Refs(); refs.feed((site / rel).read_text(encoding='utf-8'))
        out |= {urllib.parse.urljoin(rel, urllib.parse.unquote(h.split('#')[0])) for h in refs.links
                if h.split('#')[0] and not h.startswith(('mailto:', 'http://', 'https://', 'javascript:'))}
    return frozenset(out)


@pytest.mark.slow
@pytest.mark.parametrize('page', BROWSER_PAGES)
def test_page_in_browser(page, site, server, browser, shots):
    url = server + f'{page}.html'
    browser.events.clear()
    browser.send('Page.navigate', url=url)
    browser.wait_event('Page.loadEventFired')
    # let late work finish (the search worker loads its index after the load event)
    browser.js("new Promise(r => setTimeout(r, 150))")
    browser.pump(0.2)
    assert browser.js('location.href') == url

    errs = problems(browser.events)
    assert not errs, f'{url}: browser errors:\n' + '\n'.join(errs)

    requested = {e['params']['request']['url'] for e in browser.events if e['method'] == 'Network.requestWillBeSent'}
    offsite = sorted(u for u in requested if not u.startswith((server, 'data:', 'blob:', 'about:')))
    assert not offsite, f'{url} fetched from outside the local server: {offsite}'

    # every image loaded (wait for the late ones, up to 10 s)
    imgs = browser.js("""new Promise(resolve => { const t0 = Date.now();
        (function check() { const im = Array.from(document.images);
          if (im.every(i => i.complete) || Date.now() - t0 > 10000)
            resolve(im.map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth]));
          else setTimeout(check, 100); })(); })""")
    broken = [src for src, complete, w in imgs if not (complete and w > 0)]
    assert not broken, f'{url}: images that did not load: {broken}'

    # every navigation link resolves: pages answer 200, in-page anchors exist
    links = browser.js("Array.from(document.querySelectorAll('nav a[href]')).map(a => a.href)")
    assert links, f'{url}: no navigation links found'
    offsite = sorted({l for l in links if not l.startswith(server)})
    assert not offsite, f'{url}: navigation links off the site: {offsite}'
    for target in sorted({l.split('#')[0] for l in links}):
        assert status(target) == 200, f'{url}: navigation link {target} answers {status(target)}'
    frags = sorted({l.split('#', 1)[1] for l in links if '#' in l and l.split('#')[0] == url and l.split('#', 1)[1]})
    missing = browser.js(f"{json.dumps(frags)}.filter(f => !document.getElementById(decodeURIComponent(f)))")
    assert not missing, f'{url}: table-of-contents anchors with no target: {missing}'

    # the page shows its notebook: a title, and nav entries for every page of the site
    assert browser.js("document.querySelector('article h1') !== null"), f'{url}: no page title'
    # resolved URLs (a.href), without fragments: an in-page anchor resolves to this page, not to every page
    nav_pages = {h.split('#')[0] for h in browser.js("Array.from(document.querySelectorAll('nav.md-nav--primary a[href]')).map(a => a.href)")}
    # a page left out of the sidebar (a module's page, reached from its part's index page) is linked from a page in it
    linked = _linked_from(site, frozenset(u[len(server):] or 'index.html' for u in nav_pages if u.startswith(server)))
    for p in PAGES:
        want = server if p == 'index' else server + f'{p}.html'
        assert want in nav_pages or (p == 'index' and server + 'index.html' in nav_pages) or f'{p}.html' in linked, \
            f'{url}: neither the sidebar nor a page it shows links to {want} ({sorted(nav_pages)})'

    # screenshot of the page (its top 3000 px: enough to see it rendered; longer ones cost seconds per page)
    m = browser.send('Page.getLayoutMetrics')
    size = m.get('cssContentSize') or m['contentSize']
    h = min(int(size["height"]), 3000)
    shot = browser.send('Page.captureScreenshot', format='png', captureBeyondViewport=True,
                        clip={'x': 0, 'y': 0, 'width': 1280, 'height': h, 'scale': 1})
    png = base64.b64decode(shot['data'])
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 5000
    (shots / f"{page.replace('/', '_')}.png").write_bytes(png)


def _tour():
    "tools/make_tour.py's TOUR: (picture, notebook) for each stage of the data's way, in the home page's order."
    spec = importlib.util.spec_from_file_location('timmdata_make_tour', ROOT / 'tools' / 'make_tour.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod.TOUR


@pytest.mark.slow
def test_tour_in_browser(site, server, browser):
    """The home page is a tour (issue 42): a picture per stage of the data's way, in order, each a link to its page; the
    browser opens the home page and every page the tour links, and each shows its pictures (and opens with one)."""
    tour = _tour()
    browser.events.clear()
    browser.send('Page.navigate', url=server + 'index.html')
    browser.wait_event('Page.loadEventFired')
    found = browser.js("""Array.from(document.querySelectorAll('article a[href] > img')).filter(i => i.src.includes('/tour/'))
        .map(i => [i.parentElement.href, i.src, i.complete && i.naturalWidth > 0])""")
    want = [(server + builder.page_name(NBS / f'{nb}.ipynb', NBS) + '.html', f'images/tour/{pic}.png') for pic, nb in tour]
    assert len(found) == len(want), f'the tour shows {len(found)} pictures, tools/make_tour.py names {len(want)}'
    for (href, src, ok), (page, pic) in zip(found, want, strict=True):
        assert href == page and src.endswith(pic) and ok, f'tour entry {href} {src} (loaded: {ok}); expected {page} {pic}'
    for href, _, _ in found:
        browser.events.clear()
        browser.send('Page.navigate', url=href)
        browser.wait_event('Page.loadEventFired')
        imgs = browser.js("""new Promise(resolve => { const t0 = Date.now();
            (function check() { const im = Array.from(document.querySelectorAll('article img'));
              if (im.every(i => i.complete) || Date.now() - t0 > 10000) resolve(im.map(i => [i.src, i.naturalWidth]));
              else setTimeout(check, 100); })(); })""")
        assert imgs and all(w > 0 for _, w in imgs), f'{href}: pictures missing or broken: {imgs}'
        assert not problems(browser.events), f'{href}: browser errors: {problems(browser.events)}'


def _notebook(cells):
    return {'cells': cells, 'metadata': {'kernelspec': {'display_name': 'python3', 'language': 'python', 'name': 'python3'}},
            'nbformat': 4, 'nbformat_minor': 5}

def _md(src): return {'cell_type': 'markdown', 'metadata': {}, 'source': src}
def _code(src, outputs=()):
    return {'cell_type': 'code', 'metadata': {}, 'source': src, 'execution_count': None, 'outputs': list(outputs)}


def _problems(stderr) -> dict:
    "notebook name -> its block of a failed build's report (the line naming it and the indented lines under it)."
    out, name = {}, None
    for line in stderr.splitlines():
        m = re.match(r'^(\S+\.ipynb)\b', line)
        if m: name = m.group(1); out[name] = line
        elif name and line.startswith(' '): out[name] += '\n' + line
        else: name = None
    return out


# Each small build takes seconds (a Python, nbdev, MkDocs): the notebook-stage failures share one build (the report
# names every notebook's problems at once), the passing cases share another; only the remote asset needs its own.
@pytest.fixture(scope='module')
def failing_build(tmp_path_factory):
    """One build of notebooks that break the page rules at the notebook stage: a saved error (01), a warning on stderr
    (02), absolute paths of the build machine in stdout, a result and markdown (03-05)."""
    tmp = tmp_path_factory.mktemp('failing')
    nbs = tmp / 'nbs'; nbs.mkdir()
    (nbs / 'index.ipynb').write_text(json.dumps(_notebook([_md('# Home\n> home page'), _code('1+1')])))
    err = {'output_type': 'error', 'ename': 'ZeroDivisionError', 'evalue': 'division by zero', 'traceback': []}
    (nbs / '01_broken.ipynb').write_text(json.dumps(_notebook([_md('# Broken\n> fails'), _code('1/0', [err])])))
    warn = _stream('<ipython-input-3>:1: UserWarning: the given NumPy array is not writable\n  warn(msg)\n', 'stderr')
    (nbs / '02_warns.ipynb').write_text(json.dumps(_notebook([_md('# Warns\n> a warning'), _code('x = 1'),
                                                              _code('f(x)', [_stream('fine\n'), warn])])))
    paths = [_stream(f'saved to {tmp}/batch.png\n'),
             {'output_type': 'execute_result', 'execution_count': 1, 'metadata': {},
              'data': {'text/plain': f"PosixPath('{ROOT}/nbs/x.png')"}},
             {'output_type': 'display_data', 'metadata': {},
              'data': {'text/markdown': 'read from `/root/.cache/timmdata/sample`', 'text/plain': 'md'}}]
    for i, out in enumerate(paths):
        (nbs / f'0{i + 3}_path{i}.ipynb').write_text(json.dumps(_notebook([_md(f'# Path {i}\n> a path'), _code('save()', [out])])))
    return tmp / 'site', paths, build(tmp / 'site', '--nbs', str(nbs), '--no-reference')


@pytest.mark.slow
def test_build_fails_on_error_output(failing_build):
    "A notebook saved with an error output must fail the build, naming the notebook and the cell."
    site, _, r = failing_build
    assert r.returncode != 0
    block = _problems(r.stderr).get('01_broken.ipynb', '')
    assert 'error outputs' in block and 'cell 1' in block and 'ZeroDivisionError' in block, r.stderr
    assert not site.exists()


def test_build_fails_on_stderr_output_and_machine_paths(failing_build):
    """A warning (any stderr stream) or an absolute path of the build machine (in stdout, a result or markdown) saved in
    a shown cell fails the build, naming each notebook and cell; the notebooks with nothing wrong are not named."""
    site, paths, r = failing_build
    assert r.returncode != 0
    probs = _problems(r.stderr)
    assert sorted(probs) == ['01_broken.ipynb', '02_warns.ipynb', '03_path0.ipynb', '04_path1.ipynb', '05_path2.ipynb'], r.stderr
    block = probs['02_warns.ipynb']
    assert 'cell 2' in block and 'stderr' in block and 'UserWarning' in block and 'cell 1' not in block, r.stderr
    for i, out in enumerate(paths):
        block = probs[f'0{i + 3}_path{i}.ipynb']
        assert 'cell 1' in block and 'absolute path' in block, f'output {i} passed: {out}\n{r.stderr}'
    assert not site.exists()


@pytest.mark.slow
def test_build_fails_on_remote_asset(tmp_path):
    "An output that loads a script from a CDN must fail the build (the site has to work offline)."
    nbs = tmp_path / 'nbs'; nbs.mkdir()
    html = {'output_type': 'display_data', 'metadata': {},
            'data': {'text/html': '<script src="https://cdn.example.com/require.min.js"></script><b>hi</b>', 'text/plain': 'hi'}}
    (nbs / 'index.ipynb').write_text(json.dumps(_notebook([_md('# Home\n> home page'), _code('show()', [html])])))
    r = build(tmp_path / 'site', '--nbs', str(nbs), '--no-reference')
    assert r.returncode != 0 and 'cdn.example.com' in r.stderr, r.stderr
    assert not (tmp_path / 'site').exists()


def _stream(text, name='stdout'): return {'output_type': 'stream', 'name': name, 'text': text}


@pytest.fixture(scope='module')
def passing_build(tmp_path_factory):
    """One build that must pass: the home page shows what nbdev hides and keeps (`#| hide`, `#| export`, a figure);
    01_quiet holds stderr in hidden cells and relative paths. The intermediate markdown is kept (work/pages)."""
    tmp = tmp_path_factory.mktemp('passing')
    nbs = tmp / 'nbs'; nbs.mkdir()
    png = base64.b64encode(_tiny_png()).decode()
    cells = [_md('# Home\n> home page'), _code('#| hide\nSECRET_HIDDEN = 1'),
             _code('#| export\ndef twice(x:int, # a number\n         )->int:\n    "Doubles `x`."\n    return 2*x'),
             _code('twice(2)', [{'output_type': 'execute_result', 'execution_count': 1, 'metadata': {}, 'data': {'text/plain': '4'}}]),
             _code('plot()', [{'output_type': 'display_data', 'metadata': {}, 'data': {'image/png': png, 'text/plain': '<Figure>'}}])]
    (nbs / 'index.ipynb').write_text(json.dumps(_notebook(cells)))
    warn = _stream('UserWarning: hidden\n', 'stderr')
    cells = [_md('# Quiet\n> hidden stderr'), _code('#| hide\nimport warnings', [warn]), _code('#| output: false\nf()', [warn]),
             _code('#| include: false\ng()', [warn]),
             _code('h()', [_stream('saved to out/demo_batch.png; see https://example.org/home/tmp/ and ~/tmp/x\n')])]
    (nbs / '01_quiet.ipynb').write_text(json.dumps(_notebook(cells)))
    return tmp, build(tmp / 'site', '--nbs', str(nbs), '--keep', str(tmp / 'work'), '--no-reference')


@pytest.mark.slow
def test_build_allows_hidden_stderr_and_relative_paths(passing_build):
    "stderr of a cell hidden from the page is fine; so are relative paths and URLs that contain /home/ or /tmp/."
    tmp, r = passing_build
    assert r.returncode == 0, r.stdout + r.stderr
    page = (tmp / 'site' / 'quiet.html').read_text()
    assert 'demo_batch.png' in page and 'UserWarning' not in page


def test_machine_path_pattern():
    "What counts as a path of the build machine, without building a site."
    hit = lambda t: bool(builder.MACHINE_PATH.search(t))
    for t in ['/tmp/tmpab12/x.png', "root '/work' ", 'File "/home/me/x.py"', '(/root/.cache)', str(ROOT / 'nbs')]:
        assert hit(t), t
    for t in ['out/bench/bench.png', 'https://example.org/home/x', 'a/tmp/b', '~/tmp', '/homework', 'docs/tmp/']:
        assert not hit(t), t


def test_shown_code_leaves_out_formatter_markers():
    "A page's code shows no `# fmt: skip` after a line nor `# fmt: off`/`# fmt: on` lines; other comments and code stay."
    code = ("x = dict(a=1,\n         b=2)  # fmt: skip\ny = 1  # the count  # fmt:skip\n    # fmt: off\nz = [1,0,\n     0,1]\n"
            "    # fmt: on\nw = '# fmt: skip inside a string'\nv = 2  # fmt: skipped, a word of a comment")
    assert builder.shown_code(code) == ("x = dict(a=1,\n         b=2)\ny = 1  # the count\nz = [1,0,\n     0,1]\n"
                                        "w = '# fmt: skip inside a string'\nv = 2  # fmt: skipped, a word of a comment")
    assert builder.shown_code('a = 1\nb = 2') == 'a = 1\nb = 2'


def test_site_parts_index_pages(tmp_path):
    """A folder's part with an "index" shows its index and the pages it names; the folder's other pages leave the sidebar,
    listed on the index page (made when no notebook gives it) and leading back to it; nothing is lost."""
    stems = ['index', 'start/go', 'engine/index', 'engine/feeder', 'engine/tune', 'engine/spans', 'config', 'loader']
    titles = {'index': 'Home', 'start/go': 'Go', 'engine/index': 'The engine', 'engine/feeder': 'Feeder',
              'engine/tune': 'Tune', 'engine/spans': 'Spans', 'config': 'Config', 'loader': 'Loader'}
    (tmp_path / 'sections.json').write_text(json.dumps([
        {'title': 'Get started', 'pages': ['start/go']},
        {'title': 'Explanation', 'sections': [
            {'title': "The data's way", 'pages': ['engine/feeder', 'loader']},
            {'title': 'The engine', 'folder': 'engine', 'index': 'engine/index', 'show': ['engine/tune']},
            {'title': "timm.data's modules", 'folder': '.', 'index': 'modules', 'lead': 'timm\'s map.'}]}]))
    parts = builder.site_parts(stems, titles, tmp_path / 'sections.json')
    assert parts['nav'] == [{'Home': 'index.md'}, {'Get started': 'start/go.md'}, {'Explanation': [
        {"The data's way": [{'Feeder': 'engine/feeder.md'}, {'Loader': 'loader.md'}]},
        {'The engine': [{'Overview': 'engine/index.md'}, {'Tune': 'engine/tune.md'}]},
        {"timm.data's modules": 'modules.md'}]}]
    assert parts['hidden'] == {'engine/spans': ('engine/index', 'The engine'), 'config': ('modules', "timm.data's modules")}
    assert parts['listed'] == {'engine/index': ['engine/feeder', 'engine/tune', 'engine/spans'], 'modules': ['config', 'loader']}
    assert parts['made'] == {'modules': ("timm.data's modules", "timm's map.")}
    page = lambda t, d: f'---\ntitle: "{t}"\ndescription: "{d}"\n---\n\n# {t}\n\n{d}\n{{ .nb-lead }}\n\nBody.\n'
    mds = {f'{st}.md': page(titles[st], f'About {titles[st]}') for st in stems}
    out = builder.part_pages(parts, titles, mds)
    assert sorted(out) == ['config.md', 'engine/index.md', 'engine/spans.md', 'modules.md']
    assert '- **[Spans](spans.md)**: About Spans' in out['engine/index.md'] and 'Body.' in out['engine/index.md']
    assert out['modules.md'].startswith('---\ntitle: "timm.data\'s modules"\n---') and '- **[Loader](loader.md)**' in out['modules.md']
    assert '{ .nb-lead }\n\nPart of [The engine](index.md).\n\nBody.' in out['engine/spans.md']
    assert 'Part of [timm.data\'s modules](modules.md).' in out['config.md']


def test_build_hides_what_nbdev_hides(passing_build):
    "`#| hide` cells vanish, `#| export` code gives way to its show_doc entry, saved figures become files."
    tmp, r = passing_build
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp / 'work' / 'pages' / 'index.md').read_text()
    assert 'SECRET_HIDDEN' not in md and 'return 2*x' not in md
    assert '### twice' in md and 'Doubles' in md and 'twice(2)' in md
    page = (tmp / 'site' / 'index.html').read_text()
    assert 'SECRET_HIDDEN' not in page and 'index_files/' in page
    assert any((tmp / 'site' / 'index_files').glob('*.png'))


def _tiny_png():
    import io
    from PIL import Image
    b = io.BytesIO(); Image.new('RGB', (4, 3), (200, 50, 0)).save(b, format='PNG')
    return b.getvalue()


# ------------------------------------------------------------------ what a reader must not meet (tools/docs/audit.py)

def _load_audit():
    spec = importlib.util.spec_from_file_location('timmdata_docs_audit', ROOT / 'tools' / 'docs' / 'audit.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

audit = _load_audit()


@pytest.mark.slow
def test_site_has_nothing_a_reader_must_not_meet(site):
    """On every page: no diary words, no raw markdown, no `NoneType`, no class shown as `def`, no private entry, every link
    to the site lands on an anchor and is relative, and at most `MAX_VISIBLE_TESTS` test calls shown in all."""
    found = audit.audit(site)
    bad = audit.defects(found)
    print('\nsite audit:', audit.counts(found))
    assert not bad, '\n'.join(f'{k} ({len(v)}):\n  ' + '\n  '.join(v[:40]) for k, v in bad.items())


# A page as nbdev's own renderer and a diary-writing page made it: each check must catch its defect.
_BAD_PAGE = """<html><body><article>
<h2 id="the-idea">The idea</h2><p>Seed 003 is a forum question; session 12 found it (issue 29).</p>
<p>See [<code>Reader</code>](https://timmdata.github.io/timmdata/readers/readers.html#reader).</p>
<h3 id="sink">Sink</h3><div class="highlight"><pre><code>def Sink(
    *args, **kwargs
):</code></pre></div>
<div class="doc-entry doc-class"><h3 id="loaderwatch" class="doc-name">LoaderWatch</h3>
<pre><code>def LoaderWatch(loader, tensorboard:NoneType=None)</code></pre></div>
<div class="doc-entry doc-class"><h3 id="_patchfill" class="doc-name">_PatchFill</h3><pre><code>class _PatchFill</code></pre></div>
<p><a href="prefetch.html#batchops">BatchOps</a> <a href="https://timmdata.github.io/timmdata/loader.html">loader</a></p>
<pre><code>test_eq(1, 1)
assert True</code></pre>
<pre><code>plan = BatchPlan(sampler, 64,
                 drop_last=True)  # fmt: skip</code></pre>
</article></body></html>"""


def test_audit_fails_on_each_defect(tmp_path):
    "Each check finds its defect on a page made the way the site was before (and nothing on a clean page)."
    (tmp_path / 'engine').mkdir()
    (tmp_path / 'engine' / 'bad.html').write_text(_BAD_PAGE)
    (tmp_path / 'engine' / 'prefetch.html').write_text('<html><article><h2 id="prefetch">Prefetch</h2></article></html>')
    found = audit.audit(tmp_path)
    c = audit.counts(found)
    assert c['diary'] == 3, found['diary']
    assert c['raw_markdown'] == 1 and c['nonetype'] == 1 and c['private'] == 1, found
    assert c['def_class'] == 2, found['def_class']  # nbdev's class with no __init__, and a class entry shown as def
    assert c['dead_anchor'] == 2, found['dead_anchor']  # #batchops lands nowhere; the doc host serves no site
    assert c['test_calls'] == 2
    assert c['fmt_marker'] == 1, found['fmt_marker']  # the formatter's marker shown in code
    audit.MAX_VISIBLE_TESTS, keep = 1, audit.MAX_VISIBLE_TESTS
    try: assert 'test_calls' in audit.defects(found)
    finally: audit.MAX_VISIBLE_TESTS = keep
    (tmp_path / 'engine' / 'bad.html').unlink()
    assert audit.defects(audit.audit(tmp_path)) == {}


def test_diary_pattern():
    "What counts as a diary phrase (how the project was made), without building a site; correct prose passes."
    hit = lambda t: bool(audit.DIARY_RE.search(t))
    for t in ['(bench/results/peers_2026-11-24.txt)', 'the medians (recipes_2026-11-26_d.txt)', 'run on 2026-11-25',
              'whether the kit fits the 64 MiB a device call carries', "the review's edited states", 'when it was lent',
              'A measured GPU timeline should\nreplace this drawing', "on this run's machine", "(today's code, not node-aware)",
              'Before this change a worker failed', 'Before: the full run (10f46b4); after: the other']:
        assert hit(t), t
    for t in ['the GPU decodes while the device computes', 'a call to create_loader carries its keywords', 'v1.0.31',
              'bench/bench_peers.py --out peers.txt', 'the committed chunks', "today's machines", 'shape (3, 224, 224)',
              'results on this machine', 'the deadbeef byte', 'the state (a dict of 2 keys)', 'seed=1234', 'in 2 rounds']:
        assert not hit(t), t


def test_navigation_has_the_five_parts_in_order(site):
    "Home, then Get started, Coming from timm, How-to guides, Explanation and Reference, as the home page's nav shows."
    page = (site / 'index.html').read_text(encoding='utf-8')
    nav = page[page.find('md-nav--primary'):]
    at = [nav.find(t) for t in ('Get started', 'Coming from timm', 'How-to guides', 'Explanation', 'Reference')]
    assert all(a > 0 for a in at) and at == sorted(at), f'navigation parts missing or out of order: {at}'
    assert (site / 'start' / 'get_started.html').is_file() and (site / 'reference' / 'index.html').is_file()
    howtos = sorted(p.name for p in (site / 'howto').glob('*.html'))
    assert len(howtos) >= 10, howtos


@pytest.mark.slow
def test_every_import_line_on_the_site_runs(site, tmp_path):
    "Every `import timmdata...`/`from timmdata... import ...` a page shows in its code runs as shown."
    lines = audit.import_lines(site)
    assert len(lines) > 20, lines
    script = tmp_path / 'imports.py'
    script.write_text('\n'.join(f'try:\n    {l}\nexcept Exception as e:\n    print({(p + ": " + l)!r}, "->", repr(e))'
                                for p, l in lines))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=_env())
    assert r.returncode == 0 and not r.stdout.strip(), f'imports that fail as the pages show them:\n{r.stdout}{r.stderr[-2000:]}'


READER_PAGES = [p for p in PAGES if p.startswith(('start/', 'howto/'))]  # what a new reader copies code from


@pytest.mark.slow
def test_code_fits_its_column(site, server, browser):
    "At a 1,280-pixel-wide window (a laptop's), no line of code on the start and how-to pages is cut: every code block's text fits the column it is shown in (no horizontal scroll inside it)."
    assert len(READER_PAGES) >= 12, READER_PAGES
    browser.send('Emulation.setDeviceMetricsOverride', width=1280, height=900, deviceScaleFactor=1, mobile=False)
    cut = {}
    try:
        for page in READER_PAGES:
            browser.events.clear()
            browser.send('Page.navigate', url=server + f'{page}.html')
            browser.wait_event('Page.loadEventFired')
            wide = browser.js("""Array.from(document.querySelectorAll('article pre > code'))
                .filter(c => c.scrollWidth > c.clientWidth + 1)
                .map(c => c.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''))""")
            if wide:
                cut[page] = wide
    finally:
        browser.send('Emulation.clearDeviceMetricsOverride')
    assert not cut, 'code cut at 1,280 px (the longest line of each block): ' + json.dumps(cut, indent=1)[:3000]


# ------------------------------------------------------------------ the reference (tools/docs/reference.py, showdoc.py)

# a module's reference page as the site showed it before: a constant with its type's docstring, a parameter with no
# Details; and a home page with a sidebar of three pages (its own contents apart)
_REF_PAGE = """<html><body><article><h1>timmdata.x</h1>
<div class="doc-entry doc-function"><h2 id="timmdata.x.f" class="doc-name">f</h2><pre><code>def f(a, b)</code></pre>
<table><thead><tr><th>Parameter</th><th>Type</th><th>Default</th><th>Details</th></tr></thead><tbody>
<tr><td><code>a</code></td><td></td><td></td><td>what a is</td></tr>
<tr><td><code>b</code></td><td><code>int</code></td><td><code>1</code></td><td></td></tr>
<tr><td><strong>Returns</strong></td><td><code>int</code></td><td></td><td></td></tr></tbody></table></div>
<div class="doc-entry doc-data"><h2 id="timmdata.x.n" class="doc-name">N</h2><pre><code>N = 3</code></pre>
<p>int([x]) -&gt; integer</p></div>
</article></body></html>"""
_HOME_PAGE = """<html><body><nav class="md-nav md-nav--primary"><ul><li><a href="index.html">Home</a>
<nav class="md-nav md-nav--secondary"><a href="#install">Install</a></nav></li><li><a href="a.html">A</a></li>
<li><a href="x/b.html#top">B</a></li></ul></nav><article><h1>Home</h1><p>five words on this page</p>
<pre><code>import x</code></pre></article></body></html>"""


def test_audit_counts_fail_over_their_thresholds(tmp_path, monkeypatch):
    """`builtin_doc` finds a builtin type's docstring; `empty_details` counts parameter rows (not Returns) with an empty
    Details cell, page by page and module by module; `home_words` and `sidebar_entries` count the home page's words
    and the pages its sidebar links. Each count over its threshold is a defect; at or under it, none."""
    (tmp_path / 'reference' / 'x').mkdir(parents=True)
    (tmp_path / 'reference' / 'x' / 'x.html').write_text(_REF_PAGE)
    (tmp_path / 'index.html').write_text(_HOME_PAGE)
    (tmp_path / 'a.html').write_text('<html><article><h1>A</h1></article></html>')
    found = audit.audit(tmp_path)
    c = audit.counts(found)
    assert c['builtin_doc'] == 1 and 'int' in found['builtin_doc'][0], found['builtin_doc']
    assert c['empty_details'] == 1 and found['empty_details'] == ['reference/x/x.html: 1 of 2'], found['empty_details']
    assert c['home_words'] == 8 and c['sidebar_entries'] == 3, c  # 'Home', five words, 'import x'; index, a, x/b
    assert [(k, n, mod, rows) for k, n, mod, _, rows in audit.empty_details_by_module(tmp_path)] == \
        [(1, 2, 'timmdata.x', [('f', 'b')])]
    for name, at in (('MAX_EMPTY_DETAILS', 1), ('MAX_HOME_WORDS', 8), ('MAX_SIDEBAR_ENTRIES', 3)):
        monkeypatch.setattr(audit, name, at)
    assert set(audit.defects(found)) == {'builtin_doc'}, audit.defects(found)
    for name, at in (('MAX_EMPTY_DETAILS', 0), ('MAX_HOME_WORDS', 7), ('MAX_SIDEBAR_ENTRIES', 2)):
        monkeypatch.setattr(audit, name, at)
    assert set(audit.defects(found)) == {'builtin_doc', 'empty_details', 'home_words', 'sidebar_entries'}


def _load_docs_tool(name):
    sys.path.insert(0, str(ROOT / 'tools' / 'docs'))
    try: return importlib.import_module(name)
    finally: sys.path.remove(str(ROOT / 'tools' / 'docs'))


_CONSTANTS_SRC = '''"""A module of constants."""
__all__ = ['LIMIT', 'NAMES', 'READ', 'DECODE', 'PLAIN', 'Marker', 'MARK', 'IMPORTED']
from os import sep as IMPORTED

# %% ../nbs/x.ipynb #abc
LIMIT = 64 << 20  # the largest file read, in bytes
NAMES = ('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q', 'r', 's', 't', 'u', 'v')
READ, DECODE = 0, 1  # the stages, in order

# what a plain value is
PLAIN = (
    3
)


class Marker:
    "A marker."


MARK = Marker()
'''


def test_constants_are_lines_with_their_comment(tmp_path, monkeypatch):
    """A constant of the reference is a line: its name, its value as written (or in brief) and the comment written beside
    it (on its line, wrapped inside it, or just above it); names one statement assigns share it; an imported one has
    no line; and never its type's docstring."""
    reference, showdoc = _load_docs_tool('reference'), _load_docs_tool('showdoc')
    (tmp_path / 'consts_mod.py').write_text(_CONSTANTS_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module('consts_mod')
    consts = reference.constants_of(mod)
    assert sorted(consts) == ['DECODE', 'LIMIT', 'MARK', 'NAMES', 'PLAIN', 'READ'], consts
    assert consts['LIMIT'][:2] == ('64 << 20', 'the largest file read, in bytes')
    assert consts['READ'][1] == consts['DECODE'][1] == 'the stages, in order' and consts['READ'][2] == consts['DECODE'][2]
    assert consts['PLAIN'][:2] == ('3', 'what a plain value is') and consts['MARK'][:2] == ('Marker()', '')
    assert reference.public_names(mod, {}, consts) == ['LIMIT', 'NAMES', 'READ', 'DECODE', 'PLAIN', 'Marker', 'MARK']
    names = reference.constant_code(mod, 'NAMES', consts['NAMES'][0])
    assert names.startswith("NAMES = ('a', 'b',") and names.endswith('…)') and len(names) < 80, names
    body = reference._module_body(mod, ['LIMIT', 'READ', 'DECODE'], consts, {}, {}, '', 'reference/x/consts_mod', {}, 2)
    lines = [line for line in body.splitlines() if line.startswith('- ')]
    assert len(lines) == 2, body
    assert '`LIMIT = 64 << 20`: the largest file read, in bytes' in lines[0] and 'id="consts_mod.limit"' in lines[0]
    assert '`READ = 0`' in lines[1] and '`DECODE = 1`' in lines[1] and lines[1].endswith(': the stages, in order')
    for value in (3, (1, 2), 'text', {'a': 1}, 2.5):  # show_doc of a constant on a notebook page: a line, no docstring
        md = showdoc.entry_markdown(value, 'X')
        assert md.count('\n') == 0 and type(value).__doc__.splitlines()[0] not in md, md


def test_parameter_sections_fill_the_details(tmp_path, monkeypatch):
    "A parameter described in a docstring's numpy-style or google-style section (the function's or its class's) has Details."
    showdoc = _load_docs_tool('showdoc')
    (tmp_path / 'sections_mod.py').write_text('''
def numpy_style(x: int, y=2):
    """Adds.

    Parameters
    ----------
    x : int
        the first
    y : int
        the second
    """


class GoogleStyle:
    """Holds.

    Args:
        a (int): the a,
            over two lines
        *rest: the others
    """
    def __init__(self, a, b=1,  # the b
                 *rest): pass
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module('sections_mod')
    table = showdoc.param_table(mod.numpy_style)
    assert '| `x` | `int` |  | the first |' in table and '| `y` |  | `2` | the second |' in table, table
    table = showdoc.param_table(showdoc._init_of(mod.GoogleStyle), drop_self=True, docs_of=mod.GoogleStyle)
    rows = table.splitlines()[2:]
    assert len(rows) == 3 and rows[0].endswith('| the a, over two lines |') and rows[1].endswith('| the b |') \
        and rows[2].endswith('| the others |'), table


def test_namedtuple_fields_fill_the_details(tmp_path, monkeypatch):
    "A NamedTuple's entry: no `_cls` row, each field's type as written and its comment from the class body as Details."
    showdoc = _load_docs_tool('showdoc')
    (tmp_path / 'fields_mod.py').write_text('''from __future__ import annotations
from typing import NamedTuple, Optional


class Bad(NamedTuple):
    "A bad image."

    index: int  # sample index
    # the file's name
    name: str
    row: Optional[int] = None  # a Parquet row
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module('fields_mod')
    md = showdoc.entry_markdown(mod.Bad, 'Bad')
    assert 'class Bad(NamedTuple):' in md and '_cls' not in md, md
    rows = showdoc.param_table(showdoc._init_of(mod.Bad), drop_self=True, docs_of=mod.Bad).splitlines()[2:]
    assert rows == ['| `index` | `int` |  | sample index |', "| `name` | `str` |  | the file's name |",
                    '| `row` | `Optional[int]` | `None` | a Parquet row |'], rows
    # as a notebook page's entries: classes a cell makes (module __main__, no file; its source in linecache), and a
    # function taking a dataclass's fields as its parameters (`delegates`, as create_loader takes LoaderOptions')
    import linecache
    cell = ('from dataclasses import dataclass\nfrom typing import NamedTuple\nfrom fastcore.meta import delegates\n\n'
            'class Cell(NamedTuple):\n    index: int  # sample index\n\n    def __str__(self): return "c"\n\n'
            '@dataclass\nclass Opts:\n    size: int = 1  # the size\n\n    def f(self): pass\n\n'
            '@delegates(Opts)\ndef make(**kwargs): pass\nmake.__delwrap__ = Opts\n')
    linecache.cache['<cell-1>'] = (len(cell), None, cell.splitlines(True), '<cell-1>')
    ns = {'__name__': '__main__'}
    exec(compile(cell, '<cell-1>', 'exec'), ns)
    try:
        rows = showdoc.param_table(showdoc._init_of(ns['Cell']), drop_self=True, docs_of=ns['Cell']).splitlines()[2:]
        made = showdoc.param_table(ns['make']).splitlines()[2:]
    finally: linecache.cache.pop('<cell-1>', None)
    assert rows == ['| `index` | `int` |  | sample index |'], rows
    assert made == ['| `size` | `int` | `1` | the size |'], made


def test_sections_that_fill_the_table_show_once(tmp_path, monkeypatch):
    """A class docstring's Args/Parameters section that fills the Details table is not shown again above the table;
    one whose parameters the table lacks stays, and so does the rest of the docstring."""
    showdoc = _load_docs_tool('showdoc')
    (tmp_path / 'once_mod.py').write_text('''
class Google:
    """Flips.

    Args:
        p: the probability of a flip

    Flips rows only.
    """
    def __init__(self, p=0.5): pass


class Numpy:
    """Crops.

    Parameters
    ----------
    size : int
        the crop's side
    """
    def __init__(self, size): pass


class Stale:
    """Pads.

    Args:
        fill: a parameter it no longer takes
    """
    def __init__(self, border): pass
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module('once_mod')
    md = showdoc.entry_markdown(mod.Google, 'Google')
    assert 'Args:' not in md and md.count('the probability of a flip') == 1 and 'Flips rows only.' in md, md
    assert '| `p` |  | `0.5` | the probability of a flip |' in md, md
    md = showdoc.entry_markdown(mod.Numpy, 'Numpy')
    assert '----' not in md and md.count("the crop's side") == 1 and 'Crops.' in md, md
    md = showdoc.entry_markdown(mod.Stale, 'Stale')
    assert 'Args:' in md and 'a parameter it no longer takes' in md, md


@pytest.mark.slow
def test_reference_is_a_page_per_module(site):
    """The reference: the sidebar lists its index and group pages only (one a package); every module has a page of its own,
    linked from its group page and from the index; each group page is a short list; no builtin's docstring anywhere."""
    ref = site / 'reference'
    modules = sorted(p.relative_to(site).as_posix() for p in ref.glob('*/**/*.html'))
    groups = sorted(p.relative_to(site).as_posix() for p in ref.glob('*.html') if p.name != 'index.html')
    assert len(modules) >= 80 and len(groups) >= 8, (len(modules), groups)
    side = {urllib.parse.urljoin('index.html', h) for h in audit.sidebar_links(site / 'index.html')}
    in_side = sorted(h for h in side if h.startswith('reference/'))
    assert 'reference/index.html' in in_side and len(in_side) <= len(groups) + 1 and set(groups) <= set(in_side), in_side  # the index and a page per package
    assert not set(modules) & side, 'module pages belong to their group pages, not the sidebar'
    def links(page):
        refs = _Refs(); refs.feed((site / page).read_text(encoding='utf-8'))
        return {urllib.parse.urljoin(page, h.split('#')[0]) for h in refs.links if not h.startswith(('#', 'http'))}
    from_index = links('reference/index.html')
    from_groups = set().union(*(links(g) for g in groups))
    assert set(modules) <= from_index, sorted(set(modules) - from_index)
    assert set(modules) <= from_groups, sorted(set(modules) - from_groups)
    for g in groups:
        words = len(' '.join(audit.read_page(site / g).text).split())
        assert words < 3000, f'{g}: {words} words; a group page lists its modules'
    found = audit.audit(site)
    assert found['builtin_doc'] == [], found['builtin_doc'][:20]


def test_module_page_opens_with_the_names_its_job_names(tmp_path, monkeypatch):
    "A module's reference opens with the public names its one-line job names (the loader's `create_loader`), then the rest in their order."
    reference = _load_docs_tool('reference')
    (tmp_path / 'lead_mod.py').write_text('"Batches: `make_it`, and helpers"\n__all__ = ["helper", "other", "make_it"]\n'
                                          'def helper(): "A helper."\ndef other(): "Another."\ndef make_it(): "The public entry."\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module('lead_mod')
    assert reference.public_names(mod, {}) == ['make_it', 'helper', 'other']


def test_404_links_are_relative(tmp_path):
    "404.html's links, assets and script config relative to the site's root, not absolute under its path."
    build = _load_docs_tool('build')
    (tmp_path / '404.html').write_text('<link href="/timmdata/assets/a.css"><script>x=new URL("/timmdata/",location)</script>'
                                       '<a href="https://github.com/timmdata/timmdata">src</a>{"search": "/timmdata/assets/w.js"}')
    build.relative_404(tmp_path, 'timmdata')
    text = (tmp_path / '404.html').read_text()
    assert '"/timmdata/' not in text and 'href="./assets/a.css"' in text and 'new URL("./",location)' in text, text
    assert 'https://github.com/timmdata/timmdata' in text
