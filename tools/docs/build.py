"""Builds the docs site from the notebooks, without Quarto.

    python tools/docs/build.py OUTDIR [--jobs N] [--keep TMPDIR]

1. Every `nbs/*.ipynb` (file-name order, `index.ipynb` first as the home page) goes through nbdev's own
   docs processors (`nbdev.processors.FilterDefaults`, what `nbdev_docs` feeds Quarto): `#| hide` cells
   vanish, `#| export` cells are replaced by their `show_doc` entries, `show_doc` cells are re-run so
   the API entries match the code. Notebooks are processed in fresh worker processes, in parallel.
2. Each processed notebook becomes one Markdown page (the Quarto cell options nbdev leaves behind,
   `echo`, `output`, `include`, `code-fold`, are honoured here); figures saved in the notebook become
   PNG/SVG files next to the page. Notebooks are NOT re-executed: the saved outputs are shown.
3. MkDocs with the Material theme renders the pages in strict mode (any warning fails the build),
   then the built HTML and CSS are checked for assets fetched from the network (scripts, styles,
   fonts, images): there must be none, so the site works offline and from GitHub Pages as it is.

Output hygiene: a page shows only what a reader should see. The build fails, naming the notebook and
the cell, when a saved output that would appear on a page (that is, after nbdev's processing, of a cell
not hidden by `#| hide`, `#| include: false` or `#| output: false`)
- is a stream named `stderr`, whatever it says. Warnings, tracebacks and text progress bars all go there
  and none belongs in the docs: silence the warning (or fix its cause), or hide the cell's output.
  One rule with no list of "harmless" messages to keep up to date;
- or holds an absolute path of the build machine (`/tmp/...`, `/work/...`, `/root/...`, `/home/...`,
  the repository's own path, the home and temporary folders): print paths relative to a folder the
  reader knows (`path.relative_to(root)`, a file name) instead. Pictures are not searched.

Prints a line as it starts, a summary when the notebooks are processed (on a terminal, a line a notebook as each
ends, overwritten), and each warning of nbdev's processing in one line naming the notebook and the cell (nbdev's
'Found cells containing imports and other code' echoes the whole cell).

Exits non-zero, naming the notebook and cell, when a notebook holds an error output or breaks a hygiene
rule, cannot be read or processed, when MkDocs warns, or when a remote asset is referenced."""
from __future__ import annotations
import argparse, ast, atexit, base64, concurrent.futures as cf, html, json, multiprocessing as mp, os, re, shutil
import posixpath, subprocess, sys, tempfile, time, warnings
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
IMAGE_EXTS = {'.png', '.jpg', '.jpeg', '.gif', '.svg', '.webp'}
SITE_MARKER = '.nojekyll'  # a folder holding this was written by us: safe to empty before a rebuild


class BuildError(Exception): pass


# ---------------------------------------------------------------- notebook -> markdown (in a worker)

_DIRECTIVE = re.compile(r'^\s*#\s*\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
_LIST_ITEM = re.compile(r'^(\s*)([-*+]|\d+[.)])\s+\S')
_FENCE = re.compile(r'^\s*(```|~~~)')


def split_directives(src: str):
    "Quarto/nbdev `#| key: value` lines at the top of a cell -> (dict, code without them)."
    lines, opts = src.splitlines(), {}
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if not m: break
        opts[m.group(1).lower()] = m.group(2).strip().strip('"\'')
        i += 1
    return opts, '\n'.join(lines[i:]).strip('\n')


_FMT_MARK = re.compile(r'[ \t]*#[ \t]*fmt:[ \t]*(?:skip|off|on)[ \t]*$')  # ruff's and black's markers, at a line's end


def shown_code(code: str) -> str:
    "A code cell as its page shows it: the formatter's markers (`# fmt: skip` after a line, `# fmt: off`/`# fmt: on` lines) left out, being for ruff, not for the reader; other comments kept."
    out = []
    for line in code.split('\n'):
        bare = _FMT_MARK.sub('', line)
        if bare != line and not bare.strip(): continue  # a line that held only the marker
        out.append(bare)
    return '\n'.join(out)


def fence(text: str, info: str = '') -> str:
    "A fenced code block that survives backticks inside `text`."
    runs = [len(r) for r in re.findall(r'`{3,}', text)]
    tick = '`' * max(3, max(runs, default=0) + 1)
    return f'{tick}{info}\n{text.rstrip()}\n{tick}'


def fix_lists(md: str) -> str:
    """Jupyter (CommonMark) starts a list right after a paragraph line; Python-Markdown needs a blank
    line first. Insert one, outside code fences, so notebook lists render as lists."""
    out, in_fence, prev = [], False, ''
    for line in md.splitlines():
        if _FENCE.match(line): in_fence = not in_fence
        elif not in_fence and _LIST_ITEM.match(line) and prev.strip() and not _LIST_ITEM.match(prev) \
                and not prev.startswith((' ', '\t', '|', '>')):
            out.append('')
        out.append(line)
        prev = line
    return '\n'.join(out)


class Linker:
    """Rewrites links to notebooks and to the nbdev doc host into links between the pages of this site, relative to the
    page they stand on (`here`, a page path such as `engine/feeder`): pages live in folders that mirror nbs/.

    With `anchors` (page md file -> the ids it has) and `symbols` (page md file + '#' + nbdev's anchor -> the symbol's
    reference anchor, as `reference.md#id`), a link to a symbol lands on it: on its entry where its page has one, else on
    its entry in the reference, else (a method with no entry of its own) on its class's entry; a link that would land on
    no anchor is dropped and its text kept (`dropped` lists them). Code blocks are left as they are."""
    def __init__(self, pages: dict, doc_prefixes: list, here: str = '', anchors: dict = None, symbols: dict = None,
                 known=()):
        self.pages = pages  # notebook file name (and nbdev html name) -> md file name, from the site's root
        self.prefixes = [p for p in doc_prefixes if p]
        self.here = posixpath.dirname(here)
        self.anchors, self.symbols, self.dropped = anchors, symbols or {}, []
        self.known = set(known) | set(self.symbols)  # 'page.md#anchor' of every symbol nbdev's doc links know

    def target(self, url: str):
        "The md page (from the site's root) and fragment a link names, or None for a link outside the site."
        for p in self.prefixes:
            if url.startswith(p):
                url = url[len(p):].lstrip('/')
                break
        path, sep, frag = url.partition('#')
        key = path if path in self.pages else posixpath.basename(path) if '://' not in path else None
        return (self.pages[key], frag) if key in self.pages else None

    def land(self, page: str, frag: str):
        "Where a link to `page#frag` lands: (page, frag), or None when no anchor there would take it."
        if not frag or self.anchors is None or frag in self.anchors.get(page, ()): return page, frag
        if f'{page}#{frag}' not in self.known: return page, frag  # not a symbol's: the site's check judges it
        ref = self.symbols.get(f'{page}#{frag}')
        if ref: return tuple(ref.split('#', 1))
        if '.' in frag and f'{page}#{frag.rsplit(".", 1)[0]}' in self.known:  # a method with no entry: its class's
            return self.land(page, frag.rsplit('.', 1)[0])
        return None

    def __call__(self, md: str) -> str:
        def repl(m):
            text, url = m.group(1), m.group(2)
            t = self.target(url)
            if t is None: return m.group(0)
            landed = self.land(*t)
            if landed is None:
                self.dropped.append(url)
                return text[1:-1]  # the link's text alone
            page, frag = landed
            rel = posixpath.relpath(page, self.here or '.')
            return f'{text}({rel}{"#" + frag if frag else ""})'
        def unnest(text):  # nbdev links a `name` inside a link's text too: a link in a link renders as raw markdown
            return _NESTED.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + '](', text)
        sub = lambda t: _LINK.sub(repl, unnest(t))
        out, chunk, in_fence = [], [], None
        for line in md.splitlines(keepends=True):
            f = _FENCE_RUN.match(line)
            if in_fence is None and f:
                out.append(sub(''.join(chunk))); chunk = []
                in_fence = f.group(1)
                out.append(line)
            elif in_fence is not None:
                out.append(line)
                if f and f.group(1).startswith(in_fence) and not line.strip()[len(f.group(1)):].strip(): in_fence = None
            else: chunk.append(line)
        out.append(sub(''.join(chunk)))
        return ''.join(out)


_FENCE_RUN = re.compile(r'^\s*(`{3,}|~{3,})')
_NESTED = re.compile(r'(\[[^\[\]\n]*)\[(`[^`\n]+`(?:\(\))?)\]\([^)\s]+\)([^\[\]\n]*)\]\(')
_LINK = re.compile(r'(\[(?:[^\[\]]|\[[^\]]*\])*\])\(([^)\s]+)\)')  # [text](url), the text may hold [`x`]


def _text(v) -> str: return ''.join(v) if isinstance(v, list) else str(v)


LAYOUT_MARK = '<!-- layout: made from the tree by tools/make_readme.py -->'


def _readme():
    "tools/make_readme.py, whose layout table the home page shows as README.md does."
    import importlib.util
    spec = importlib.util.spec_from_file_location('timmdata_make_readme', HERE.parent / 'make_readme.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def here(name: str) -> str:
    "A page's file (`engine/feeder_files/x.png`, from the site's root) as the page links it: from its own folder."
    return name.split('/', name.count('/') - 1)[-1] if name.count('/') > 1 else name


def render_outputs(cell, opts, page_stem, files, cell_no) -> list:
    parts = []
    if opts.get('output') == 'false': return parts
    asis = opts.get('output') == 'asis'
    for j, out in enumerate(cell.get('outputs', [])):
        kind = out.get('output_type')
        if kind == 'stream':
            txt = _text(out.get('text', ''))
            if txt.strip():
                cls = 'nb-stderr' if out.get('name') == 'stderr' else 'nb-output'
                parts.append(fence(txt, f'{{ .text .{cls} }}'))
            continue
        if kind not in ('execute_result', 'display_data'): continue
        data = out.get('data', {})
        if 'image/png' in data or 'image/jpeg' in data or 'image/gif' in data:
            mime = next(m for m in ('image/png', 'image/jpeg', 'image/gif') if m in data)
            name = f'{page_stem}_files/cell{cell_no:03d}_out{j}.{mime.split("/")[1]}'
            files[name] = base64.b64decode(_text(data[mime]))
            parts.append(f'![output of cell {cell_no}]({here(name)}){{ .nb-figure }}')
        elif 'image/svg+xml' in data:
            name = f'{page_stem}_files/cell{cell_no:03d}_out{j}.svg'
            files[name] = _text(data['image/svg+xml']).encode()
            parts.append(f'![output of cell {cell_no}]({here(name)}){{ .nb-figure }}')
        elif 'text/markdown' in data:
            md = _text(data['text/markdown']).strip('\n')
            parts.append(md if asis else f'<div class="nb-md-output" markdown="1">\n\n{md}\n\n</div>')
        elif 'text/html' in data:
            parts.append(f'<div class="nb-html-output">\n{_text(data["text/html"]).strip()}\n</div>')
        elif 'text/plain' in data:
            parts.append(fence(_text(data['text/plain']), '{ .text .nb-output }'))
    return parts


def nb_to_markdown(nb, page_stem: str, linker) -> tuple:
    "A processed notebook -> (title, markdown text, {relative file name: bytes})."
    fm, parts, files = {}, [], {}
    for i, cell in enumerate(nb.cells):
        src = cell.get('source') or ''
        if cell.cell_type == 'raw':
            s = src.strip()
            if s.startswith('---'):
                import yaml
                fm.update(yaml.safe_load(s.strip('-').strip()) or {})
            continue
        if cell.cell_type == 'markdown':
            if src.strip().startswith('<!-- WARNING: THIS FILE WAS AUTOGENERATED'): continue
            for name, bundle in (cell.get('attachments') or {}).items():  # images pasted into a markdown cell
                mime = next((m for m in bundle if m.startswith('image/')), None)
                if not mime: continue
                fn = f'{page_stem}_files/cell{i:03d}_{re.sub(r"[^A-Za-z0-9_.-]", "_", name)}'
                files[fn] = base64.b64decode(_text(bundle[mime])) if mime != 'image/svg+xml' else _text(bundle[mime]).encode()
                src = src.replace(f'attachment:{name}', here(fn))
            if LAYOUT_MARK in src: src = src.replace(LAYOUT_MARK, _readme().layout_markdown())  # as README.md has it
            parts.append(linker(fix_lists(src.strip('\n'))))
            continue
        if cell.cell_type != 'code': continue
        opts, code = split_directives(src)
        if opts.get('include') == 'false': continue
        if code.strip() and opts.get('echo') != 'false':
            block = fence(shown_code(code), 'python')
            if 'code-fold' in opts:
                summary = opts.get('code-summary', 'Code')
                block = f'??? nb-source "{summary}"\n\n' + '\n'.join('    ' + l if l else '' for l in block.splitlines())
            parts.append(block)
        parts.extend(render_outputs(cell, opts, page_stem, files, i))
    title = str(fm.get('title') or posixpath.basename(page_stem).replace('_', ' ').capitalize())
    head = ['---', 'title: ' + json.dumps(title)]
    if fm.get('description'): head.append('description: ' + json.dumps(' '.join(str(fm['description']).split())))
    head += ['---', '', f'# {title}', '']
    if fm.get('description'):
        head += [html.escape(' '.join(str(fm['description']).split()), quote=False), '{ .nb-lead }', '']
    return title, '\n'.join(head) + '\n' + '\n\n'.join(p for p in parts if p.strip()) + '\n', files


def error_outputs(nb_json: dict) -> list:
    "Every saved error output of a notebook, as 'cell N: Ename: value' lines."
    errs = []
    for i, c in enumerate(nb_json.get('cells', [])):
        for o in c.get('outputs', []) if c.get('cell_type') == 'code' else []:
            if o.get('output_type') == 'error':
                errs.append(f"cell {i}: {o.get('ename', '?')}: {str(o.get('evalue', ''))[:300]}")
    return errs


# Folders of a build machine: a path under one of these in a page's output tells the reader nothing but
# where the notebook last ran. Only a path that starts there counts: `https://x.org/home/`, `a/tmp/b` do not.
MACHINE_DIRS = ('/tmp', '/var/tmp', '/var/folders', '/private/var', '/work', '/root', '/home', '/Users', '/mnt')


def machine_path_re(extra=()) -> re.Pattern:
    "A pattern for absolute paths of this machine: `MACHINE_DIRS`, the repository, home and temp folders."
    dirs = {d.rstrip('/') for d in (*MACHINE_DIRS, *extra) if d and d.rstrip('/')}
    alts = '|'.join(re.escape(d) for d in sorted(dirs, key=len, reverse=True))
    return re.compile(rf'(?<![\w.~-])(?:{alts})(?![\w.-])(?:/[^\s\'"`)\]<>,;]*)?')

MACHINE_PATH = machine_path_re((str(ROOT), str(Path.home()), tempfile.gettempdir()))


def shown_text(out) -> str:
    "The text of an output that `render_outputs` would put on the page ('' for pictures)."
    kind = out.get('output_type')
    if kind == 'stream': return _text(out.get('text', ''))
    if kind not in ('execute_result', 'display_data'): return ''
    data = out.get('data', {})
    if any(m in data for m in ('image/png', 'image/jpeg', 'image/gif', 'image/svg+xml')): return ''
    for m in ('text/markdown', 'text/html', 'text/plain'):
        if m in data: return _text(data[m])
    return ''


def _snippet(text: str, at: int = 0, width: int = 100) -> str:
    s = ' '.join(text[max(0, at - 20):at + width].split())
    return repr(s if len(s) <= width else s[:width] + '...')


def hygiene_problems(cells, pattern=MACHINE_PATH) -> list:
    """Outputs of processed notebook `cells` that a page would show but must not: stderr streams and
    absolute paths of this machine, as 'cell N: ...' lines (N: the cell's index in the saved notebook)."""
    probs = []
    for c in cells:
        if c.get('cell_type') != 'code': continue
        opts, _ = split_directives(c.get('source') or '')
        if opts.get('include') == 'false' or opts.get('output') == 'false': continue
        meta = c.get('metadata') or {}
        first = (c.get('source') or '').strip().splitlines()[-1:] or ['']
        where = (f"cell {meta['raw_idx_']}" + (f" (id {c['id']})" if c.get('id') else '') if 'raw_idx_' in meta
                 else f'the generated cell {first[0][:60]!r}')  # a show_doc entry nbdev added
        stderr, paths = [], {}  # one line per cell for stderr (tqdm writes dozens), one per distinct path
        for o in c.get('outputs', []):
            txt = shown_text(o)
            if o.get('output_type') == 'stream' and o.get('name') == 'stderr':
                if txt.strip(): stderr.append(txt)
                continue
            for m in pattern.finditer(txt): paths.setdefault(m.group(0), _snippet(txt, m.start()))
        if stderr:
            more = f' ({len(stderr)} stderr outputs)' if len(stderr) > 1 else ''
            probs.append(f'{where}: stderr output on the page{more} (silence it or hide the output): {_snippet(stderr[0])}')
        probs += [f'{where}: absolute path of the build machine {p!r} in {snip}' for p, snip in paths.items()]
    return probs


_DEF_NODES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions_only(src: str):
    """The imports, functions and classes of a code cell that also runs other statements (tests, demonstrations), as
    code; None when the cell is all definitions, calls show_doc, or does not parse (it then runs as it is).
    nbdev's docs processing runs every cell holding an import (with a warning, 'Found cells containing imports and other
    code') and replaces its outputs with fresh ones. The pages show the saved outputs, so running such a cell's tests is
    time spent for nothing (a DataLoader with workers, a subprocess: seconds a cell). Its definitions still run, so
    a later show_doc finds its names; a name a show_doc needs from a dropped statement fails the build, naming the cell.
    A cell whose code the page hides (`#| echo: false`: a figure or table made for the page) still runs whole."""
    try: tree = ast.parse(src)
    except SyntaxError: return None
    if 'show_doc' in src or all(isinstance(n, _DEF_NODES) for n in tree.body): return None
    return '\n'.join(ast.get_source_segment(src, n, padded=True) for n in tree.body if isinstance(n, _DEF_NODES))


def _run_definitions_only():
    "nbdev's exec_show_docs, running only the definitions of a cell that mixes them with other code (in this worker)."
    from nbdev import processors
    begin = processors.exec_show_docs.begin
    if getattr(begin, 'definitions_only', False): return

    def patched_begin(self):
        begin(self)
        k = getattr(self, 'k', None)
        if k is None: return
        run_cell = k.cell

        def cell(c, *args, **kwargs):
            d = c.directives_
            hidden_code = str((d.get('echo:') or d.get('echo') or [''])[0]).lower() == 'false'  # shown by its output only
            code = None if c.cell_type != 'code' or d.keys() & _SHOW_DIRS or hidden_code else definitions_only(c.source)
            if code is None: return run_cell(c, *args, **kwargs)
            k._cell_idx = c.idx_ + 1
            k.run(code)  # the cell's saved outputs stay: they are what the page shows
        k.cell = cell
    patched_begin.definitions_only = True
    processors.exec_show_docs.begin = patched_begin

_SHOW_DIRS = {'export', 'exports', 'exporti', 'exec_doc'}  # cells nbdev runs for their show_doc entries: run whole


def build_reference(nb_pages: dict, doc_url: str) -> dict:
    "Runs in a worker: the reference pages (tools/docs/reference.py), their backticked names linked as nbdev links them."
    os.environ['IN_TEST'] = '1'
    os.environ.setdefault('MPLBACKEND', 'Agg')
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
    if str(HERE) not in sys.path: sys.path.insert(0, str(HERE))
    try:
        import reference
        from nbdev.doclinks import NbdevLookup
        r = reference.reference_pages(nb_pages, doc_url=doc_url)
        nl = NbdevLookup()
        r['pages'] = {k: nl.linkify(v) for k, v in r['pages'].items()}
        return r
    except Exception as e:
        import traceback
        return {'error': f'the reference pages: {e}\n{traceback.format_exc(limit=6)}'}


_ANCHOR_ATTR = re.compile(r'\{[^}\n]*?#([^\s}]+)[^}\n]*\}|\bid="([^"]+)"')
_HEADING = re.compile(r'^#{1,6}\s+(.+?)\s*(?:\{[^}]*\})?\s*#*\s*$', re.M)


def page_anchors(md: str) -> set:
    "The ids a page's markdown gives: explicit ones (`{ #id }`, `id=\"...\"`) and its headings' (as the toc slugifies)."
    from markdown.extensions.toc import slugify
    ids = {(a or b).replace('\\_', '_') for a, b in _ANCHOR_ATTR.findall(md)}
    for h in _HEADING.findall(md):
        text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', h).replace('`', '').replace('*', '')
        ids.add(slugify(html.unescape(text), '-'))
    return ids


_EXPLAINED = re.compile(r'Explained on \[its page\]\(([^)\s]+)\)\.')


def explained_links(md: str, linker, anchors: dict) -> str:
    "A reference entry's 'Explained on its page' link: to the entry there where the page has one, else the page's top."
    def repl(m):
        t = linker.target(m.group(1))
        if t is None: return ''
        page, frag = t
        return f'Explained on [its page]({m.group(1) if frag in anchors.get(page, ()) else m.group(1).split("#")[0]}).'
    return _EXPLAINED.sub(repl, md)


_MIXED = 'Found cells containing imports and other code'


def warning_line(w, cells: list) -> str:
    """A warning of nbdev's processing in one line: the notebook's `cells` (as saved) give the cell's index and id
    where the warning quotes the cell's source, as nbdev's 'Found cells containing imports and other code' does."""
    def code(src): return '\n'.join(l for l in src.splitlines() if not _DIRECTIVE.match(l)).strip()  # nbdev drops some

    msg = str(w.message)
    src = msg.split('\n---\n', 1)[1].rsplit('\n---', 1)[0] if '\n---\n' in msg else None
    where = ''
    if src is not None:
        i = next((i for i, c in enumerate(cells) if code(_text(c.get('source', ''))) == code(src)), None)
        first = code(src).split('\n', 1)[0]
        cell = f"cell {i}" + (f" (id {cells[i]['id']})" if cells[i].get('id') else '') if i is not None else 'a cell'
        where = f'{cell}, {_snippet(first, 0, 70)}'
    if msg.startswith(_MIXED):
        return f"{where}: imports and other code in one cell (nbdev's warning)"
    text = ' '.join(msg.split('\n---\n', 1)[0].split())
    return f'{where + ": " if where else ""}{w.category.__name__}: {text[:200]} ({Path(w.filename).name}:{w.lineno})'


def process_notebook(path: str, page_stem: str, pages: dict, prefixes: list) -> dict:
    "Runs in a fresh worker process: nbdev's docs processors, then markdown. Returns a picklable dict."
    os.environ['IN_TEST'] = '1'  # as nbdev's own docs processing does: notebooks may skip work under it
    os.environ.setdefault('MPLBACKEND', 'Agg')
    path = Path(path)
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))  # the library, as nbdev_test sees it
    os.chdir(path.parent)  # notebooks run from nbs/ under nbdev_test: relative paths must agree
    t0 = time.time()
    try:
        raw = json.loads(path.read_text(encoding='utf-8'))
    except Exception as e:
        return {'error': f'{path.name}: cannot read the notebook: {e}'}
    errs = error_outputs(raw)
    if errs:
        return {'error': f'{path.name} holds error outputs (fix the notebook, re-run and save it):\n  ' + '\n  '.join(errs)}
    try:
        from execnb.nbio import read_nb
        from nbdev.processors import FilterDefaults
        _run_definitions_only()
        if str(HERE) not in sys.path: sys.path.insert(0, str(HERE))
        import showdoc
        showdoc.use_in_nbdev()  # reference entries as a library's docs show them
        nb = read_nb(path)
        for c in nb.cells: c.metadata['raw_idx_'] = c.idx_  # processing renumbers cells: keep the saved index
        with warnings.catch_warnings(record=True) as caught:  # the filters as they were; each said in one line
            FilterDefaults()(nb)
        said = [warning_line(w, raw.get('cells', [])) for w in caught]
        bad = hygiene_problems(nb.cells)
        if bad: return {'error': f'{path.name} shows output that does not belong on a page (fix the notebook, '
                                 're-run and save it):\n  ' + '\n  '.join(bad)}
        title, md, files = nb_to_markdown(nb, page_stem, lambda md: md)  # links: in the main process, with every page's anchors
    except Exception as e:
        import traceback
        return {'error': f'{path.name}: nbdev docs processing failed: {e}\n{traceback.format_exc(limit=4)}'}
    return {'title': title, 'md': md, 'files': files, 'secs': time.time() - t0, 'warnings': said}


# ---------------------------------------------------------------- the site

def discover(nbs: Path) -> list:
    """index.ipynb first, then every other notebook in file-name order, folder by folder (nbs/ mirrors the packages: a
    folder's pages sit in the site's folder of that name); no _private or .hidden ones."""
    found = sorted((p for p in nbs.rglob('*.ipynb') if not any(s.startswith(('_', '.')) for s in p.relative_to(nbs).parts)),
                   key=lambda p: (p.parent != nbs, p.relative_to(nbs).parent.as_posix(), p.name != 'index.ipynb', p.name))
    index = nbs / 'index.ipynb'
    if index not in found:
        raise BuildError(f'{index} is missing: it is the home page of the site (and the source of README.md)')
    return [index] + [p for p in found if p != index]


def page_name(nb: Path, nbs: Path = None) -> str:
    """The page a notebook becomes, named as nbdev/Quarto names it (`38_loader.ipynb` -> `loader`), in its folder under
    `nbs` (`nbs/engine/30_feeder.ipynb` -> `engine/feeder`; a folder's `index.ipynb` -> `engine/index`, its front page)."""
    stem = re.sub(r'^\d+[a-zA-Z0-9]*_', '', nb.name.lower()).rsplit('.', 1)[0]
    folder = nb.parent.relative_to(nbs).as_posix() if nbs is not None and nb.parent != nbs else ''
    return f'{folder}/{stem}' if folder else stem


SECTIONS_FILE = 'sections.json'  # the navigation's parts, in order: see `site_nav`


def site_nav(stems: list, titles: dict, sections_file: Path) -> list:
    "The navigation (the sidebar): `site_parts`'s 'nav'."
    return site_parts(stems, titles, sections_file)['nav']


def site_parts(stems: list, titles: dict, sections_file: Path) -> dict:
    """The navigation: Home first, then the parts `sections_file` names, in its order (Get started, Coming from timm,
    How-to guides, Explanation, Reference). A part is {"title", and "pages": [page stems] or "folder": a folder of nbs/
    (its pages not placed before, in file order) or "sections": [parts]}; a part of one page is a single entry. A page
    no part names goes at the end, under its folder's name, so no page is lost.

    A folder's part may name an "index" page (a stem; a page the build makes, titled as the part, with its "lead" line,
    when no notebook gives it): the sidebar then shows the index ('Overview') and the pages "show" names, and the folder's
    other pages are left out of the sidebar, reached from the index page, which lists every page of the folder.
    Returns {'nav': the navigation, 'hidden': {stem: (its part's index stem, the part's title)} for the pages left out,
    'listed': {index stem: [the stems its page lists]}, 'made': {index stem: (title, lead)} for the pages to make}."""
    spec = json.loads(sections_file.read_text(encoding='utf-8')) if sections_file.exists() else []
    folder = {stem: posixpath.dirname(stem) or '.' for stem in stems}
    placed = {'index'}
    hidden, listed, made = {}, {}, {}
    def named(sec):  # the pages a part names itself, placed before any folder takes its rest
        for st in [*sec.get('pages', []), *sec.get('show', []), *([sec['index']] if 'index' in sec else [])]: placed.add(st)
        for sub in sec.get('sections', []): named(sub)
    for sec in spec: named(sec)
    def entry(st): return {titles[st] if st in titles else made[st][0]: f'{st}.md'}
    def build(sec):
        if 'sections' in sec:
            items = [x for x in (build(sub) for sub in sec['sections']) if x]
        elif 'pages' in sec:
            items = [entry(st) for st in sec['pages'] if st in titles]
        else:
            mine = [st for st in stems if folder[st] == sec['folder'] and st not in placed and st not in taken]
            taken.update(mine)
            items = [entry(st) for st in mine]
            if 'index' in sec:  # the index and the pages shown; the rest reached from the index page
                ix = sec['index']
                if ix not in titles: made[ix] = (sec['title'], sec.get('lead', ''))
                listed[ix] = [st for st in stems if folder[st] == sec['folder'] and st not in (ix, 'index')]
                hidden.update({st: (ix, sec['title']) for st in mine})
                items = [{'Overview': f'{ix}.md'}] + [entry(st) for st in sec.get('show', []) if st in titles]
                if len(items) == 1: return {sec['title']: f'{ix}.md'}
        if not items: return None
        if 'pages' in sec and len(items) == 1: return {sec['title']: next(iter(items[0].values()))}
        return {sec['title']: items}
    taken = set()
    out = [{'Home': 'index.md'}] if 'index' in titles else []
    for sec in spec:
        b_ = build(sec)
        if b_: out.append(b_)
    rest = [st for st in stems if st not in placed and st not in taken]
    for f in dict.fromkeys(folder[st] for st in rest):
        out.append({f: [{titles[st]: f'{st}.md'} for st in rest if folder[st] == f]})
    return {'nav': out, 'hidden': hidden, 'listed': listed, 'made': made}


def _description(md: str) -> str:
    "A page's one-line description, from the front matter `nb_to_markdown` writes ('' when it has none)."
    m = re.search(r'^description: (".*")$', md.split('\n---\n', 1)[0], re.M)
    return json.loads(m.group(1)) if m else ''


def part_pages(parts: dict, titles: dict, mds: dict) -> dict:
    """The pages `site_parts` changes or makes, as {md file: markdown}: each part's index page with the list of its pages
    (title and description, linked), made when no notebook gives it; each page left out of the sidebar with a line under
    its title that leads back to its part's index page."""
    out = {}
    for ix, stems in parts['listed'].items():
        here = posixpath.dirname(ix) or '.'
        lines = [f'- **[{titles[st]}]({posixpath.relpath(st + ".md", here)})**' +
                 (f': {_description(mds[st + ".md"])}' if _description(mds.get(st + '.md', '')) else '') for st in stems]
        if ix in parts['made']:
            title, lead = parts['made'][ix]
            md = f'---\ntitle: {json.dumps(title)}\n---\n\n# {title}\n\n' + (f'{lead}\n{{ .nb-lead }}\n\n' if lead else '')
        else: md = mds[ix + '.md'].rstrip('\n') + '\n\n'
        out[ix + '.md'] = md + '## Pages\n\n' + '\n'.join(lines) + '\n'
    for st, (ix, title) in parts['hidden'].items():
        md = out.get(st + '.md', mds[st + '.md'])
        back = f'Part of [{title}]({posixpath.relpath(ix + ".md", posixpath.dirname(st) or ".")}).'
        head, sep, body = md.partition('{ .nb-lead }\n')  # under the description, else under the title
        if not sep: head, sep, body = md.partition(f'\n# {titles[st]}\n')
        out[st + '.md'] = head + sep + '\n' + back + '\n' + body if sep else md
    return out


def mkdocs_config(cfg, docs_dir: Path, site_dir: Path, nav: list, not_in_nav=()) -> dict:
    "MkDocs' settings; `not_in_nav`: page stems built but left out of the sidebar on purpose (no 'omitted' warning)."
    host = (cfg.get('doc_host') or '').rstrip('/')
    base = (cfg.get('doc_baseurl') or '').strip('/')
    c = {
        'site_name': cfg.get('title') or cfg.get('lib_name'),
        'site_description': cfg.get('description', ''),
        'site_author': cfg.get('author', ''),
        'copyright': 'Copyright ' + cfg.get('copyright', ''),
        'docs_dir': str(docs_dir), 'site_dir': str(site_dir),
        # page names as nbdev's: `loader.html`, so nbdev's doc links and this site agree
        'use_directory_urls': False,
        'strict': True,
        'nav': nav,
        'theme': {
            'name': 'material',
            'font': False,  # no Google fonts: nothing is fetched from the network to view a page
            # toc.integrate: a page's contents in the left sidebar, so that the code column is wide enough for the
            # code (120 characters at a 1,300-pixel window: tests/test_docs_browser.py test_code_fits_its_column)
            'features': ['navigation.top', 'navigation.footer', 'search.highlight', 'search.suggest',
                         'toc.follow', 'toc.integrate', 'content.code.copy'],
            'palette': [
                {'scheme': 'default', 'primary': 'deep orange', 'accent': 'orange',
                 'toggle': {'icon': 'material/weather-night', 'name': 'Dark mode'}},
                {'scheme': 'slate', 'primary': 'deep orange', 'accent': 'orange',
                 'toggle': {'icon': 'material/weather-sunny', 'name': 'Light mode'}}],
        },
        'plugins': ['search'],
        'extra_css': ['assets/timmdata.css'],
        'markdown_extensions': [
            'admonition', 'attr_list', 'md_in_html', 'tables', 'footnotes', 'def_list',
            {'toc': {'permalink': True}},
            'pymdownx.details',
            {'pymdownx.highlight': {'use_pygments': True, 'anchor_linenums': False}},
            'pymdownx.inlinehilite', 'pymdownx.superfences',
        ],
        'validation': {'nav': {'omitted_files': 'warn', 'not_found': 'warn'},
                       'links': {'not_found': 'warn', 'unrecognized_links': 'info'}},
    }
    if not_in_nav: c['not_in_nav'] = '\n'.join(f'/{st}.md' for st in not_in_nav)  # gitignore-style, from docs_dir
    if host: c['site_url'] = f'{host}/{base}/' if base else f'{host}/'
    if cfg.get('git_url'):  # a plain link in the footer; `repo_url` would make Material call the GitHub API
        c['extra'] = {'social': [{'icon': 'fontawesome/brands/github', 'link': cfg['git_url'], 'name': 'Source'}],
                      'generator': False}
    return c


class AssetScan(HTMLParser):
    "Collects every URL a browser would fetch while showing the page (not plain links)."
    FETCHED_REL = {'stylesheet', 'preload', 'modulepreload', 'prefetch', 'icon', 'shortcut', 'manifest',
                   'apple-touch-icon', 'mask-icon', 'preconnect', 'dns-prefetch'}

    def __init__(self):
        super().__init__(); self.urls = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'link':
            rel = set((a.get('rel') or '').lower().split())
            if rel & self.FETCHED_REL and a.get('href'): self.urls.append(('link ' + ' '.join(sorted(rel)), a['href']))
        for key in ('src', 'data-src', 'poster'):
            if a.get(key) and tag in ('script', 'img', 'iframe', 'source', 'video', 'audio', 'embed', 'input', 'track'):
                self.urls.append((f'{tag} {key}', a[key]))
        if tag in ('img', 'source') and a.get('srcset'):
            for part in a['srcset'].split(','):
                if part.strip(): self.urls.append((f'{tag} srcset', part.split()[0]))
        if tag == 'object' and a.get('data'): self.urls.append(('object data', a['data']))
        if a.get('style'): self.urls += [('style url()', u) for u in _css_urls(a['style'])]

    def handle_data(self, data):
        if self.lasttag == 'style': self.urls += [('style url()', u) for u in _css_urls(data)]


def relative_404(site: Path, base: str):
    """404.html's links and assets relative to the site's root (`assets/...`, not `/timmdata/assets/...`): mkdocs writes
    them absolute under the site's path, which works only where the site is served under that path."""
    page = site / '404.html'
    if not page.exists() or not base: return
    text = page.read_text(encoding='utf-8')
    page.write_text(re.sub(rf'(["\'])/{re.escape(base)}/', r'\1./', text), encoding='utf-8')  # links, scripts, config


def _css_urls(css: str) -> list:
    urls = re.findall(r'url\(\s*[\'"]?([^\'")]+)', css)
    urls += re.findall(r'@import\s+[\'"]([^\'"]+)', css)
    return urls


def _remote(u: str) -> bool: return bool(re.match(r'^\s*(https?:)?//', u, re.I))


def remote_assets(site: Path) -> list:
    bad = []
    for f in sorted(site.rglob('*.html')):
        p = AssetScan(); p.feed(f.read_text(encoding='utf-8', errors='replace'))
        bad += [f'{f.relative_to(site)}: <{k}> {u}' for k, u in p.urls if _remote(u)]
    for f in sorted(site.rglob('*.css')):
        bad += [f'{f.relative_to(site)}: url() {u}' for u in _css_urls(f.read_text(encoding='utf-8', errors='replace')) if _remote(u)]
    return bad


def safe_outdir(out: Path):
    "Refuses to empty a folder that we did not build (a typo must not wipe the repository)."
    out = out.resolve()
    if out in (ROOT, ROOT.parent, Path('/'), Path.home()) or ROOT.is_relative_to(out):
        raise BuildError(f'refusing to build the site into {out}: give a folder of its own, e.g. docs')
    for keep in ('nbs', 'timmdata', 'tests', 'tools'):
        if out == ROOT / keep or out.is_relative_to(ROOT / keep):
            raise BuildError(f'refusing to build the site into {out}: it is inside {keep}/')
    if out.exists() and any(out.iterdir()) and not (out / SITE_MARKER).exists():
        raise BuildError(f'{out} is not empty and holds no {SITE_MARKER}, so it is not a site this script built; '
                         'remove it or pick another folder')


def _code_text(notebooks) -> str:
    "The code cells of `notebooks`, joined (unreadable notebooks count as empty: their worker reports them)."
    out = []
    for nb in notebooks:
        try: cells = json.loads(Path(nb).read_text(encoding='utf-8')).get('cells', [])
        except Exception: continue
        out += [_text(c.get('source', '')) for c in cells if c.get('cell_type') == 'code']
    return '\n'.join(out)


def _worker_context(notebooks=()):
    """Processes for the notebooks, one per notebook (no state leaks between notebooks), forked from a fork server
    that has imported what the notebooks' import cells import (torch, the library, nbdev's processors, matplotlib):
    each notebook does not pay those imports again (about 3 s each). Only the packages the notebooks' code names are
    preloaded: a small site (the docs-build tests) does not pay for torch and the library (most of its build time).
    Spawned interpreters where there is no fork."""
    if 'forkserver' not in mp.get_all_start_methods(): return mp.get_context('spawn')
    os.environ['IN_TEST'] = '1'; os.environ.setdefault('MPLBACKEND', 'Agg')  # inherited by the server
    os.environ['PYTHONPATH'] = os.pathsep.join(p for p in (str(ROOT), os.environ.get('PYTHONPATH')) if p)
    import pkgutil
    mods = ['torch', 'torchvision', 'matplotlib.pyplot', 'numpy', 'PIL.Image', 'fastcore.test', 'nbdev.showdoc',
            'nbdev.processors', 'execnb.nbio', 'execnb.shell', 'timmdata']
    lib = ROOT / 'timmdata'  # every module, in the packages too
    mods += ['timmdata.' + '.'.join(p.relative_to(lib).with_suffix('').parts) for p in sorted(lib.rglob('*.py'))
             if not any(s.startswith('_') for s in p.relative_to(lib).parts)]
    code, always = _code_text(notebooks), ('nbdev', 'execnb')  # what process_notebook itself imports
    mods = [m for m in mods if m.split('.')[0] in always or re.search(rf'\b{m.split(".")[0]}\b', code)]
    ctx = mp.get_context('forkserver')
    ctx.set_forkserver_preload(mods)  # a module that fails to import is skipped by the server (shows up in its notebook)
    return ctx


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('outdir', help='folder to write the site into (docs for GitHub Pages)')
    ap.add_argument('--jobs', type=int, default=max(1, min(4, os.cpu_count() or 1)), help='notebooks processed at once')
    ap.add_argument('--nbs', default=None, help='notebook folder (default: nbs_path from settings.ini)')
    ap.add_argument('--no-reference', dest='reference', action='store_false',
                    help='leave out the reference pages (a quick build of a few notebooks)')
    ap.add_argument('--keep', default=None, help='write the intermediate markdown and mkdocs.yml here and keep them')
    args = ap.parse_args(argv)
    t0 = time.time()
    os.chdir(ROOT)
    from nbdev.config import get_config
    cfg = get_config()
    nbs = Path(args.nbs).resolve() if args.nbs else Path(cfg.config_path) / cfg.get('nbs_path', 'nbs')
    out = Path(args.outdir)
    if not out.is_absolute(): out = ROOT / out
    safe_outdir(out)
    notebooks = discover(nbs)

    stems = {}
    for nb in notebooks:
        stem = page_name(nb, nbs)
        if stem in stems: raise BuildError(f'{nb.name} and {stems[stem].name} would both become the page {stem}.html')
        stems[stem] = nb
    pages = {}  # what a link may name -> the md page
    for stem, nb in stems.items():
        for k in (nb.name, stem + '.html', stem + '.md', posixpath.basename(stem) + '.html'): pages.setdefault(k, stem + '.md')
    host = (cfg.get('doc_host') or '').rstrip('/')
    base = (cfg.get('doc_baseurl') or '').strip('/')
    prefixes = [f'{host}/{base}/' if base else f'{host}/', f'/{base}/' if base else '']

    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix='timmdata-docs-'))
    if not args.keep: atexit.register(shutil.rmtree, work, True)  # also when the build fails
    docs_dir, site_tmp = work / 'pages', work / 'site'
    for d in (docs_dir, site_tmp):
        if d.exists(): shutil.rmtree(d)
    (docs_dir / 'assets').mkdir(parents=True)
    shutil.copy(HERE / 'timmdata.css', docs_dir / 'assets' / 'timmdata.css')
    for f in sorted(nbs.rglob('*')):  # pictures the notebooks' markdown links to by relative path
        rel = f.relative_to(nbs)
        if f.is_file() and f.suffix.lower() in IMAGE_EXTS and not any(s.startswith(('.', '_')) for s in rel.parts):
            (docs_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, docs_dir / rel)

    print(f'docs: processing {len(notebooks)} notebooks with nbdev ({args.jobs} at a time), and the reference', flush=True)
    results, failures, t1, tty = {}, [], time.time(), sys.stdout.isatty()
    ctx = _worker_context(notebooks)  # a fresh process per notebook: no state leaks between notebooks
    nb_pages = {nb.relative_to(nbs).as_posix(): stem + '.md' for stem, nb in stems.items()}
    with cf.ProcessPoolExecutor(max_workers=min(args.jobs, len(notebooks)), mp_context=ctx, max_tasks_per_child=1) as ex:
        ref_fut = ex.submit(build_reference, nb_pages, prefixes[0]) if args.reference else None
        futs = {ex.submit(process_notebook, str(nb), stem, pages, prefixes): nb for stem, nb in stems.items()}
        for fut in cf.as_completed(futs):
            nb = futs[fut]
            try: r = fut.result()
            except Exception as e: r = {'error': f'{nb.name}: worker died: {e!r}'}
            if 'error' in r: failures.append(r['error'])
            else:
                results[nb] = r
                if tty: print(f'\r\033[K  {len(results)}/{len(notebooks)} {nb.name}: {r["secs"]:.1f}s', end='', flush=True)
        ref = ref_fut.result() if ref_fut else {'pages': {}, 'titles': {}, 'symbols': {}, 'known': [], 'failed': []}
    if tty: print('\r\033[K', end='')
    said = [f'  {nb.relative_to(nbs)} {line}' for nb in notebooks if nb in results for line in results[nb]['warnings']]
    slow = sorted(results.items(), key=lambda kv: -kv[1]['secs'])[:3]
    print(f'docs: {len(results)} notebooks processed in {time.time() - t1:.0f}s (the longest: '
          + ', '.join(f'{nb.name} {r["secs"]:.1f}s' for nb, r in slow) + '); '
          + (f'{len(said)} warnings, a line each:' if said else 'no warnings'), flush=True)
    for line in said: print(line, flush=True)
    if failures:
        raise BuildError('notebook problems:\n' + '\n'.join(failures))
    if ref.get('error'): raise BuildError(ref['error'])
    for f in ref['failed']: print(f'docs: reference: left out {f}', flush=True)

    mds = {f'{stem}.md': results[nb]['md'] for stem, nb in stems.items()}
    mds.update({f'{stem}.md': f'---\ntitle: {json.dumps(t)}\n---\n\n# {t}\n\n' + ref['pages'][stem]
                for stem, t in ref['titles'].items()})
    for stem in ref['pages']: pages.setdefault(stem + '.md', stem + '.md')
    anchors = {page: page_anchors(md) for page, md in mds.items()}
    dropped = []
    for page, md in mds.items():
        linker = Linker(pages, prefixes, page[:-3], anchors, ref['symbols'], ref['known'])
        md = explained_links(md, linker, anchors)
        mds[page] = linker(md)
        dropped += [f'{page}: {u}' for u in linker.dropped]
    if dropped:
        print(f'docs: {len(dropped)} links to symbols that have no entry anywhere were written as plain text', flush=True)

    titles = {stem: ('Home' if stem == 'index' else results[nb]['title']) for stem, nb in stems.items()}
    titles.update(ref['titles'])
    for page, md in mds.items():
        (docs_dir / page).parent.mkdir(parents=True, exist_ok=True)
        (docs_dir / page).write_text(md, encoding='utf-8')
    for nb, r in results.items():
        for name, data in r['files'].items():
            (docs_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (docs_dir / name).write_bytes(data)
    unlisted = ref.get('unlisted', [])  # the reference's module pages: reached from its group pages, not the sidebar
    parts = site_parts([st for st in titles if st not in set(unlisted)], titles, nbs / SECTIONS_FILE)
    nav = parts['nav']
    for page, md in part_pages(parts, titles, mds).items():  # the parts' index pages list their pages
        (docs_dir / page).parent.mkdir(parents=True, exist_ok=True)
        (docs_dir / page).write_text(md, encoding='utf-8')

    yml = work / 'mkdocs.yml'
    not_in_nav = [*unlisted, *parts['hidden']]  # pages reached from an index page, not from the sidebar
    yml.write_text(json.dumps(mkdocs_config(cfg, docs_dir, site_tmp, nav, not_in_nav=not_in_nav), indent=1),
                   encoding='utf-8')  # JSON is YAML
    print('docs: mkdocs build --strict', flush=True)
    env = {**os.environ, 'NO_MKDOCS_2_WARNING': '1'}
    p = subprocess.run([sys.executable, '-m', 'mkdocs', 'build', '--strict', '--clean', '-q', '-f', str(yml)],
                       cwd=work, env=env, capture_output=True, text=True)
    log = (p.stdout + p.stderr).strip()
    if log: print(log)
    if p.returncode != 0:
        raise BuildError(f'mkdocs build failed (exit {p.returncode}): every warning is an error in strict mode')

    relative_404(site_tmp, (cfg.get('doc_baseurl') or '').strip('/'))
    bad = remote_assets(site_tmp)
    if bad:
        raise BuildError('the site would fetch assets from the network (it must work offline):\n  ' + '\n  '.join(bad[:30]))

    (site_tmp / SITE_MARKER).touch()  # GitHub Pages: serve the folder as it is, no Jekyll
    if out.exists(): shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(site_tmp, out)
    n_html = len(list(out.rglob('*.html')))
    print(f'docs: wrote {len(stems)} pages ({n_html} html files) to {out} in {time.time() - t0:.1f}s')


if __name__ == '__main__':
    try: main()
    except BuildError as e:
        print(f'docs build FAILED: {e}', file=sys.stderr)
        sys.exit(1)
