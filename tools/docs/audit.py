"""What a reader of the built site must not meet, counted page by page.

    python tools/docs/audit.py SITE            # counts per check, then each defect (exit 1 if any)
    python tools/docs/audit.py SITE --counts   # the counts only

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
  `MAX_VISIBLE_TESTS` in all is a defect (tests that teach stay visible; the rest run hidden).
`tests/test_docs_browser.py` runs it on the site it builds; each check has a test that it fails on a page with the defect."""
from __future__ import annotations
import argparse, html, json, re, sys, urllib.parse
from html.parser import HTMLParser
from pathlib import Path

DIARY = [r'\bsessions? \d+', r"\b(?:this|next|first|second|third|earlier|previous|last|that|one|no|a) session\b(?!\s*(?:of (?:IPython|Jupyter)|state))",
         r"\bsession's\b", r'\bseed (?:notebook|\d{3})\b', r'\bissues? \d+\b', r'\b(?:was|been|were) lent\b',
         r'\bwave \d+\b', r'\bround \d+\b', r'\b20\d\d-\d\d-\d\d\b', r'\bthe tracker\b']
DIARY_RE = re.compile('|'.join(f'(?:{d})' for d in DIARY), re.I)
RAW_MD = re.compile(r'\[[^\]\n]{1,200}\]\((?:https?://|\.\.?/|#|[\w./-]+\.(?:html|ipynb|md)\b)[^)\s]*\)')
MAX_VISIBLE_TESTS = 400
TEST_CALL = re.compile(r'^\s*(?:test_\w+\(|assert\b)', re.M)
DOC_HOST = 'timmdata.github.io'


class Page(HTMLParser):
    "The article of a page: its text (code apart), its ids, its links, its code blocks and its entries."
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links, self.text, self.code, self.entries = set(), [], [], [], []
        self.depth = 0  # inside <article>
        self._pre, self._code_buf, self._entry = 0, [], None
        self.headings, self._heading = [], None  # every h2-h4's text: an old-style entry is a heading named as its symbol

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

    def handle_endtag(self, tag):
        if not self.depth: return
        if tag == 'article': self.depth -= 1
        if tag == 'pre' and self._pre:
            self._pre -= 1
            code = ''.join(self._code_buf)
            self.code.append(code)
            if self.entries and self.entries[-1]['sig'] is None: self.entries[-1]['sig'] = code
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


def read_page(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding='utf-8', errors='replace'))
    return p


def _snip(text: str, at: int, width: int = 90) -> str:
    return ' '.join(text[max(0, at - 30):at + width].split())


def audit(site: Path) -> dict:
    "{check: [defect lines]} over every page of `site`, and 'test_calls' per page as 'page: N'."
    site = Path(site)
    pages = {f.relative_to(site).as_posix(): f for f in sorted(site.rglob('*.html'))
             if f.name != '404.html' and 'search' not in f.relative_to(site).parts}
    parsed = {rel: read_page(f) for rel, f in pages.items()}
    out = {k: [] for k in ('diary', 'raw_markdown', 'nonetype', 'def_class', 'private', 'dead_anchor', 'test_calls')}
    for rel, p in parsed.items():
        text = ' '.join(p.text)
        code = '\n'.join(p.code)
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


def counts(found: dict) -> dict:
    c = {k: len(v) for k, v in found.items() if k != 'test_calls'}
    c['test_calls'] = sum(int(x.rsplit(': ', 1)[1]) for x in found['test_calls'])
    return c


def defects(found: dict) -> dict:
    "The checks that failed: every list but test_calls, which fails on its total."
    bad = {k: v for k, v in found.items() if v and k != 'test_calls'}
    total = counts(found)['test_calls']
    if total > MAX_VISIBLE_TESTS:
        top = sorted(found['test_calls'], key=lambda x: -int(x.rsplit(': ', 1)[1]))[:10]
        bad['test_calls'] = [f'{total} test calls shown on pages (at most {MAX_VISIBLE_TESTS}: hide the ones that do not '
                             'teach with #| hide); the most: ' + ', '.join(top)]
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('site')
    ap.add_argument('--counts', action='store_true', help='the counts only, as JSON')
    args = ap.parse_args(argv)
    found = audit(Path(args.site))
    c = counts(found)
    if args.counts:
        print(json.dumps(c))
        return 0
    print(json.dumps(c))
    bad = defects(found)
    for k, v in bad.items():
        print(f'\n{k}: {len(v)}')
        for line in v[:400]: print('  ' + line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
