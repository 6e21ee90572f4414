"""What a reader of the built site must not meet, counted page by page.

    python tools/docs/audit.py SITE            # counts per check, then each defect (exit 1 if any)
    python tools/docs/audit.py SITE --counts   # the counts only, then the parameter rows with no Details, page by page
    python tools/docs/audit.py SITE --empty-details   # modules by parameter rows with no Details (most first), named

Checks every html page of a site built by tools/docs/build.py (the article of each page, not the theme around it):

- `diary`: words that say how the project was made, not what it is (sessions, seeds, this tracker's issue numbers,
  which machine was lent, dates of runs): `DIARY`;
- `raw_markdown`: markdown that did not render (`[text](url)` as text, in code or prose);
- `nonetype`: a type shown as `NoneType` (a signature typed from its default, not as written);
- `def_class`: a class or exception shown as `def X(...)`;
- `private`: an entry for a private name (`_x`, a module's `__getattr__`/`__dir__`);
- `dead_anchor`: a link to a page of the site whose `#fragment` is no id on that page, or a link to the doc host
  (`timmdata.github.io`), which serves no site: links are relative so the site works from disk and any host;
- `test_calls`: test calls a page shows (`test_eq(...)`, `assert ...` in visible code): counted, and over
  `MAX_VISIBLE_TESTS` in all is a defect (tests that teach stay visible; the rest run hidden);
- `fmt_marker`: a formatter's marker shown in code (`# fmt: skip`, `# fmt: off`): for ruff, not the reader (the build
  leaves them out: `build.shown_code`);
- `builtin_doc`: a builtin type's docstring shown (`int([x]) -> integer`: a constant's entry that showed its type's doc);
- `empty_details`: parameter rows (of a `Parameter | Type | Default | Details` table, the Returns row apart) with an empty
  Details cell: counted per page, and over `MAX_EMPTY_DETAILS` in all is a defect (the docment after each parameter,
  `x: int = 1,  # what x is`, fills the cell);
- `home_words`: the words of the home page's article (prose and code): over `MAX_HOME_WORDS` is a defect;
- `sidebar_entries`: the pages the sidebar links (the home page's, its own contents apart): over `MAX_SIDEBAR_ENTRIES`
  is a defect.
`tests/test_docs_browser.py` runs it on the site it builds; each check has a test that it fails on a page with the defect."""
from __future__ import annotations
import argparse, html, json, re, sys, urllib.parse
from html.parser import HTMLParser
from pathlib import Path

DIARY = [r'\bsessions? \d+', r"\b(?:this|next|first|second|third|earlier|previous|last|that|one|no|a) session\b(?!\s*(?:of (?:IPython|Jupyter)|state))",
         r"\bsession's\b", r'\bseed (?:notebook|\d{3})\b', r'\bissues? \d+\b', r'\blent\b',
         r'\bwave \d+\b', r'\bround \d+\b', r'\bthe tracker\b',
         # a run's date, alone or in a result file's name (`peers_2026-11-24.txt`: `_` is a word character, so no \b)
         r'(?<!\d)20\d\d-[01]\d-[0-3]\d(?!\d)', r'\bbench/results/',  # result files: CHANGELOG.md and bench/README.md
         r'\bdevice\s+calls?\b', r'\ba\s+call\s+carries\b', r"\bthis\s+run's\s+machine\b",  # the machine a change ran on
         r'\bedited\s+states\b', r"\bthe\s+review(?:'s|ers?)?\b", r'\bshould\s+replace\s+this\s+(?:drawing|picture|figure)\b',
         r"\btoday's\s+(?:code|tree)\b", r'\b(?:before|after|since)\s+this\s+change\b',  # the page's history, not what is true now
         r'\(\s*(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\s*\)']  # a commit, as `(10f46b4)`
DIARY_RE = re.compile('|'.join(f'(?:{d})' for d in DIARY), re.I)
FMT_MARK = re.compile(r'#\s*fmt:\s*(?:skip|off|on)\b')
RAW_MD = re.compile(r'\[[^\]\n]{1,200}\]\((?:https?://|\.\.?/|#|[\w./-]+\.(?:html|ipynb|md)\b)[^)\s]*\)')
MAX_VISIBLE_TESTS = 400
TEST_CALL = re.compile(r'^\s*(?:test_\w+\(|assert\b)', re.M)
DOC_HOST = 'timmdata.github.io'
# thresholds of the counts that may only go down: the site's figures when they were set (lower them as pages improve)
MAX_EMPTY_DETAILS = 0  # of 5,466 parameter rows on the site's pages (the reference and the notebook pages)
MAX_HOME_WORDS = 1700
MAX_SIDEBAR_ENTRIES = 90
DETAILS_HEAD = ['Parameter', 'Type', 'Default', 'Details']  # the parameter table of an entry (tools/docs/showdoc.py)


def _builtin_docs() -> dict:
    "The first line of each builtin type's docstring (int, tuple, str, dict, ...; not the exceptions') -> the type's name."
    import builtins, collections, enum, pathlib, types
    out = {}
    classes = [v for m in (builtins, types, collections, pathlib, enum) for v in vars(m).values()
               if isinstance(v, type) and not issubclass(v, BaseException)]  # 'File not found.' may be a page's own words
    for t in classes + [type(None), type(Ellipsis), type(NotImplemented)]:
        d = t.__doc__.strip() if isinstance(t.__doc__, str) else ''
        first = ' '.join(d.splitlines()[0].split()) if d else ''
        if len(first) >= 12: out.setdefault(first, t.__name__)
    return out

BUILTIN_DOCS = _builtin_docs()
BUILTIN_RE = re.compile('|'.join(re.escape(d) for d in sorted(BUILTIN_DOCS, key=len, reverse=True)))


class Page(HTMLParser):
    "The article of a page: its text (code apart), its ids, its links, its code blocks and its entries."
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links, self.text, self.code, self.entries = set(), [], [], [], []
        self.depth = 0  # inside <article>
        self._pre, self._code_buf, self._entry = 0, [], None
        self.headings, self._heading = [], None  # every h2-h4's text: an old-style entry is a heading named as its symbol
        self.tables, self._cell = [], None  # each table: {'head': [th texts], 'rows': [[td texts]], 'entry': its entry's name}
        self.title, self._h1 = '', None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'article': self.depth += 1
        if not self.depth: return
        if a.get('id'): self.ids.add(a['id'])
        if a.get('name') and tag == 'a': self.ids.add(a['name'])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])
        if tag == 'pre': self._pre += 1; self._code_buf = []
        if tag in ('h2', 'h3', 'h4'): self._heading = []
        if tag in ('h1', 'h2', 'h3', 'h4', 'h5') and 'doc-name' in (a.get('class') or ''):
            self._entry = {'id': a.get('id', ''), 'name': [], 'sig': None}
        if tag == 'div' and 'doc-entry' in (a.get('class') or ''):
            self.entries.append({'class': a.get('class'), 'name': '', 'id': '', 'sig': None})
        if tag == 'table': self.tables.append({'head': [], 'rows': [], 'entry': self.entries[-1]['name'] if self.entries else ''})
        if tag == 'tr' and self.tables: self.tables[-1]['rows'].append([])
        if tag in ('th', 'td') and self.tables: self._cell = []
        if tag == 'h1' and not self.title: self._h1 = []

    def handle_endtag(self, tag):
        if not self.depth: return
        if tag == 'article': self.depth -= 1
        if tag == 'pre' and self._pre:
            self._pre -= 1
            code = ''.join(self._code_buf)
            self.code.append(code)
            if self.entries and self.entries[-1]['sig'] is None: self.entries[-1]['sig'] = code
        if tag in ('th', 'td') and self._cell is not None and self.tables:
            t, txt = self.tables[-1], ' '.join(''.join(self._cell).split())
            (t['head'] if tag == 'th' else t['rows'][-1] if t['rows'] else t['head']).append(txt)
            self._cell = None
        if tag == 'h1' and self._h1 is not None:
            self.title, self._h1 = ''.join(self._h1).replace('¶', '').strip(), None
        if tag in ('h2', 'h3', 'h4') and self._heading is not None:
            self.headings.append(''.join(self._heading).replace('¶', '').strip())
            self._heading = None
        if tag in ('h1', 'h2', 'h3', 'h4', 'h5') and self._entry is not None:
            name = ''.join(self._entry['name']).replace('¶', '').strip()
            if self.entries and not self.entries[-1]['name']:
                self.entries[-1].update(name=name, id=self._entry['id'])
            self._entry = None

    def handle_data(self, data):
        if not self.depth: return
        if self._pre: self._code_buf.append(data)
        else: self.text.append(data)
        if self._entry is not None: self._entry['name'].append(data)
        if self._heading is not None: self._heading.append(data)
        if self._cell is not None: self._cell.append(data)
        if self._h1 is not None: self._h1.append(data)

    def empty_details(self) -> list:
        "(entry name, parameter) of each parameter row whose Details cell is empty, and the number of parameter rows."
        empty, n = [], 0
        for t in self.tables:
            if t['head'] != DETAILS_HEAD: continue
            for row in t['rows']:
                if not row or row[0] in ('Returns', '') or len(row) != len(DETAILS_HEAD): continue
                n += 1
                if not row[-1]: empty.append((t['entry'], row[0]))
        return empty, n


def read_page(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding='utf-8', errors='replace'))
    return p


def _snip(text: str, at: int, width: int = 90) -> str:
    return ' '.join(text[max(0, at - 30):at + width].split())


def audit(site: Path) -> dict:
    """{check: [defect lines]} over every page of `site`; the counts as 'page: N' lines ('test_calls', 'home_words',
    'sidebar_entries'; 'empty_details' as 'page: N of M parameter rows')."""
    site = Path(site)
    pages = {f.relative_to(site).as_posix(): f for f in sorted(site.rglob('*.html'))
             if f.name != '404.html' and 'search' not in f.relative_to(site).parts}
    parsed = {rel: read_page(f) for rel, f in pages.items()}
    out = {k: [] for k in ('diary', 'raw_markdown', 'nonetype', 'def_class', 'private', 'dead_anchor', 'test_calls',
                           'builtin_doc', 'fmt_marker', 'empty_details', 'home_words', 'sidebar_entries')}
    for rel, p in parsed.items():
        text = ' '.join(p.text)
        code = '\n'.join(p.code)
        for src in (' '.join(text.split()), code):
            for m in BUILTIN_RE.finditer(src):
                out['builtin_doc'].append(f'{rel}: the docstring of `{BUILTIN_DOCS[m.group(0)]}`: "{_snip(src, m.start(), 60)}"')
        empty, n = p.empty_details()
        if empty: out['empty_details'].append(f'{rel}: {len(empty)} of {n}')
        if rel == 'index.html':
            out['home_words'].append(f'{rel}: {len((text + " " + code).replace("¶", " ").split())}')
            out['sidebar_entries'].append(f'{rel}: {len(sidebar_links(pages[rel]))}')
        for m in FMT_MARK.finditer(code): out['fmt_marker'].append(f'{rel}: "{_snip(code, m.start(), 60)}"')
        for m in DIARY_RE.finditer(text): out['diary'].append(f'{rel}: {m.group(0)!r} in "{_snip(text, m.start())}"')
        for src in (text, code):
            for m in RAW_MD.finditer(src): out['raw_markdown'].append(f'{rel}: {m.group(0)[:100]!r}')
        for src in (text, code):
            for m in re.finditer(r'\bNoneType\b', src): out['nonetype'].append(f'{rel}: "{_snip(src, m.start(), 60)}"')
        for e in p.entries:
            sig = (e['sig'] or '').lstrip()
            if ('doc-class' in e['class'] or 'doc-exception' in e['class']) and not sig.startswith('class '):
                out['def_class'].append(f'{rel}: {e["name"]} is a class shown as {sig[:40]!r}')
            last = e['name'].split('.')
            if any(x.startswith('_') and not (x.startswith('__') and x.endswith('__')) for x in last) or \
                    (len(last) == 1 and last[0] in ('__getattr__', '__dir__')):
                out['private'].append(f'{rel}: an entry for the private name {e["name"]}')
        names = {e['name'] for e in p.entries}
        for h in p.headings:  # an entry nbdev rendered: a heading named as a private symbol
            if h not in names and re.fullmatch(r'_[A-Za-z]\w*(\.\w+)?', h) and not h.startswith('__'):
                out['private'].append(f'{rel}: an entry for the private name {h}')
        for sig in (c for c in p.code if re.match(r'\s*def [A-Z]\w*\(\s*\*args, \*\*kwargs\s*\)', c)):
            out['def_class'].append(f'{rel}: {sig.strip()[:60]!r}')  # nbdev's rendering of a class with no __init__
        n = len(TEST_CALL.findall('\n'.join(c for c in p.code if not c.lstrip().startswith(('class ', 'def ', '@')))))
        if n: out['test_calls'].append(f'{rel}: {n}')
        for href in p.links:
            u = urllib.parse.urlsplit(href)
            if u.netloc == DOC_HOST or (u.netloc and u.netloc.endswith('.' + DOC_HOST)):
                out['dead_anchor'].append(f'{rel}: a link to the doc host, which serves no site: {href}')
                continue
            if u.scheme or u.netloc: continue
            target = rel if not u.path else urllib.parse.urljoin(rel, u.path)
            target = target.split('?')[0]
            if target.endswith('/'): target += 'index.html'
            if target not in parsed:
                if u.path.endswith(('.html', '.ipynb', '.md')):
                    out['dead_anchor'].append(f'{rel}: a link to a page that is not there: {href}')
                continue
            if u.fragment and urllib.parse.unquote(u.fragment) not in parsed[target].ids:
                out['dead_anchor'].append(f'{rel}: {href} lands on no anchor')
    return out


def import_lines(site: Path) -> list:
    "(page, statement) for every import of the library a page's code shows, each as one line of Python."
    import ast
    out = []
    for f in sorted(Path(site).rglob('*.html')):
        rel = f.relative_to(site).as_posix()
        for code in read_page(f).code:
            try: tree = ast.parse(code)
            except SyntaxError: continue
            for node in ast.walk(tree):
                mod = node.module if isinstance(node, ast.ImportFrom) else None
                names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
                if (mod and mod.split('.')[0] == 'timmdata' and not node.level) or \
                        (isinstance(node, ast.Import) and any(n.split('.')[0] == 'timmdata' for n in names)):
                    line = ast.unparse(node)
                    if (rel, line) not in out: out.append((rel, line))
    return out


COUNTED = ('test_calls', 'empty_details', 'home_words', 'sidebar_entries')  # 'page: N' lines, summed; the rest: defects


def _n(line: str) -> int: return int(line.rsplit(': ', 1)[1].split()[0])


def counts(found: dict) -> dict:
    c = {k: len(v) for k, v in found.items() if k not in COUNTED}
    c.update({k: sum(_n(x) for x in found.get(k, ())) for k in COUNTED})
    return c


def defects(found: dict) -> dict:
    "The checks that failed: every list but the counts, each of which fails on its total over its threshold."
    bad = {k: v for k, v in found.items() if v and k not in COUNTED}
    c = counts(found)
    top = lambda k: ', '.join(sorted(found[k], key=lambda x: -_n(x))[:10])
    if c['test_calls'] > MAX_VISIBLE_TESTS:
        bad['test_calls'] = [f'{c["test_calls"]} test calls shown on pages (at most {MAX_VISIBLE_TESTS}: hide the ones '
                             'that do not teach with #| hide); the most: ' + top('test_calls')]
    if c['empty_details'] > MAX_EMPTY_DETAILS:
        bad['empty_details'] = [f'{c["empty_details"]} parameter rows with no Details (at most {MAX_EMPTY_DETAILS}: write '
                                'a docment after each parameter, `x: int = 1,  # what x is`); the most: ' + top('empty_details')]
    if c['home_words'] > MAX_HOME_WORDS:
        bad['home_words'] = [f'the home page has {c["home_words"]} words (at most {MAX_HOME_WORDS}): what the library is, '
                             'how to install it, a quick start and where to go next; the rest belongs on other pages']
    if c['sidebar_entries'] > MAX_SIDEBAR_ENTRIES:
        bad['sidebar_entries'] = [f'the sidebar links {c["sidebar_entries"]} pages (at most {MAX_SIDEBAR_ENTRIES}): '
                                  'list fewer in nbs/sections.json (a page not listed is reached from the one that links it)']
    return bad


class _Nav(HTMLParser):
    "The links of a page's primary navigation (the sidebar)."
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth, self.links = 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'nav' and (self.depth or 'md-nav--primary' in (a.get('class') or '')): self.depth += 1
        elif tag == 'a' and self.depth and a.get('href'): self.links.append(a['href'])

    def handle_endtag(self, tag):
        if tag == 'nav' and self.depth: self.depth -= 1


def sidebar_links(path: Path) -> set:
    "The pages the sidebar of the page at `path` links (its own contents, `#` links, apart), as paths from the page."
    p = _Nav()
    p.feed(Path(path).read_text(encoding='utf-8', errors='replace'))
    return {h.split('#')[0] for h in p.links if not h.startswith('#') and h.split('#')[0]}


def empty_details_by_module(site: Path) -> list:
    """(rows with no Details, parameter rows, module, its notebook, [(entry, parameter)]) of each reference module page
    (`reference/<package>/<module>.html`, titled with the module's name), most empty rows first."""
    out = []
    for f in sorted((Path(site) / 'reference').glob('*/**/*.html')):
        p = read_page(f)
        empty, n = p.empty_details()
        if empty: out.append((len(empty), n, p.title, _notebook_of(p.title), empty))
    return sorted(out, key=lambda x: (-x[0], x[2]))


def _notebook_of(module: str) -> str:
    "The notebook a module of this repository is generated from ('nbs/streams/20b_net.ipynb'), or ''."
    base = Path(__file__).resolve().parents[2].joinpath(*module.split('.'))
    for f in (base.with_suffix('.py'), base / '__init__.py'):
        if f.is_file():
            m = re.search(r'File to edit: (?:\.\./)+(nbs/\S+\.ipynb)', f.read_text(encoding='utf-8')[:600])
            return m.group(1) if m else ''
    return ''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('site')
    ap.add_argument('--counts', action='store_true',
                    help='the counts only, as JSON, then the parameter rows with no Details page by page')
    ap.add_argument('--empty-details', action='store_true',
                    help="the reference's modules by parameter rows with no Details, most first, each row named")
    args = ap.parse_args(argv)
    if args.empty_details:
        for k, n, mod, nb, rows in empty_details_by_module(Path(args.site)):
            by = {}
            for e, prm in rows: by.setdefault(e, []).append(prm)
            print(f'{k:4d} of {n:<4d} {mod} ({nb or "no notebook"}): ' + '; '.join(f'{e}({", ".join(ps)})' for e, ps in by.items()))
        return 0
    found = audit(Path(args.site))
    c = counts(found)
    if args.counts:
        print(json.dumps(c))
        print('empty_details by page (parameter rows with no Details, of all):')
        for line in sorted(found['empty_details'], key=lambda x: (-_n(x), x)): print('  ' + line)
        return 0
    print(json.dumps(c))
    bad = defects(found)
    for k, v in bad.items():
        print(f'\n{k}: {len(v)}')
        for line in v[:400]: print('  ' + line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
