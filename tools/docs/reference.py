"""The site's reference: every public name of the library, a short page per module, grouped by package.

The notebook pages explain a stage and show the entries of the names it defines, in the order a reader needs them;
the reference lists them all, the way a library's API reference does:

- `reference/index`: every package (a group page) with every module of it, each linked;
- a group page per package (`reference/streams`): the package's one paragraph, then its modules, each linked with its
  one-line job (the first line of the module's docstring, which nbdev writes from the notebook's description);
- a page per module (`reference/streams/net`, the top-level modules of timm's map under `reference/timm_data/`): its
  job, the page that explains it, then each public name (the module's `__all__`, defined there) with its signature,
  docstring and parameter table (`showdoc.entry_markdown`), a class's public methods under it, and the module's
  constants last, a line each: the name, its value as written (or in brief) and the comment written beside it.

The sidebar lists the index and the group pages; the module pages are reached from them (`unlisted`).

`reference_pages(pages)` runs in a docs-build worker (it imports every module of the library) and returns the pages'
markdown and, for each symbol nbdev's doc links know (`_modidx`), the anchor of its entry here, so that a link to a
symbol whose notebook page shows no entry of it lands here instead."""
from __future__ import annotations
import ast, importlib, inspect, io, pkgutil, re, sys, tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path: sys.path.insert(0, str(HERE))
from showdoc import constants_markdown, entry_markdown, is_private, source_url, unwrap  # noqa: E402

# the packages, as the reference's group pages, in the order of the data's way; the top-level modules are timm's map
PACKAGES = [('timm_data', "timm.data's modules", None), ('readers', 'Readers', 'readers'), ('pixels', 'Pixels', 'pixels'), ('batch', 'Batches', 'batch'),
            ('store', 'The store', 'store'), ('net', 'Bytes from far away', 'net'), ('sources', 'Sources', 'sources'),
            ('index', 'Indexes', 'index'), ('parquet', 'Parquet files', 'parquet'), ('streams', 'Streams', 'streams'),
            ('mix', 'Mixing datasets', 'mix'),
            ('engine', 'The engine', 'engine'), ('watch', 'Watching a loader', 'watch'), ('tools', 'Tools', 'tools'), ('core', 'Core', 'core')]
METHOD_DUNDERS = ('__call__', '__iter__', '__len__', '__getitem__')
SLUG = {'index': 'indexes'}  # a package whose name a page of the reference has already (reference/index: the index)


def _notebook_of(mod) -> str | None:
    "The notebook a generated module says it comes from ('File to edit: ../nbs/x.ipynb'), relative to nbs/."
    try: head = Path(mod.__file__).read_text(encoding='utf-8')[:600]
    except Exception: return None
    m = re.search(r'File to edit: ((?:\.\./)+)nbs/(\S+\.ipynb)', head)
    return m.group(2) if m else None


def _modules(lib: str):
    "(package key, module name) of every module of the library, private ones (`_x`) left out."
    pkg = importlib.import_module(lib)
    out = []
    for m in pkgutil.walk_packages(pkg.__path__, lib + '.'):
        parts = m.name.split('.')[1:]
        if any(p.startswith('_') for p in parts): continue
        key = parts[0] if (m.ispkg or len(parts) > 1) else 'timm_data'
        out.append((key, m.name))
    return out


def is_data(obj) -> bool:
    "A constant: not a class, a function or method, a property or a module."
    o = unwrap(obj)
    return not (inspect.isclass(o) or inspect.isroutine(o) or isinstance(obj, property) or inspect.ismodule(o))


def public_names(mod, modidx_syms: dict, consts: dict | None = None) -> list:
    """The module's public names defined there: `__all__` less private names and names it imports from elsewhere.
    A constant counts where the module's source assigns it (`consts`, from `constants_of`), not where it is imported."""
    consts = constants_of(mod) if consts is None else consts
    names = []
    for n in getattr(mod, '__all__', None) or []:
        if is_private(n) or not hasattr(mod, n): continue
        obj = getattr(mod, n)
        if inspect.ismodule(obj): continue
        if is_data(obj):
            if n in consts: names.append(n)
            continue
        home = getattr(unwrap(obj), '__module__', None)
        if f'{mod.__name__}.{n}' in modidx_syms or home in (None, mod.__name__) or not home.startswith('timmdata'):
            names.append(n)
    # the names the module's one-line job names lead its page, in that order (the loader's: `create_loader` first),
    # the helpers after them
    lead = [n for n in re.findall(r'`([A-Za-z_][A-Za-z0-9_]*)`', _first_line(mod) or '') if n in names]
    return list(dict.fromkeys(lead + names))


def methods(cls) -> list:
    "A class's public methods and properties, in the order its body defines them."
    out = []
    for n, v in cls.__dict__.items():
        if (n.startswith('_') and n not in METHOD_DUNDERS) or not (
                inspect.isfunction(v) or isinstance(v, (property, classmethod, staticmethod))): continue
        if n in METHOD_DUNDERS and not (unwrap(v).__doc__ or '').strip(): continue
        out.append((n, v))
    return out


# ---------------------------------------------------------------- constants, as their source writes them

_CELL_MARK = re.compile(r'^#\s*%%')  # nbdev's `# %% ../nbs/x.ipynb #id` line before each exported cell
_PRIVATE_ID = re.compile(r'(?<![\w.])_[A-Za-z]\w*')


def constants_of(mod) -> dict:
    """Name -> (value as written or None, comment, statement number) of each constant the module's source assigns at its top level
    (`X = 1`, `X: int = 1`, `A, B = 0, 1`). The comment is the one written beside it: on its first or last line, inside a
    statement of up to three lines (a value the formatter wrapped), else the comment lines just above it; or a string
    right after it (an attribute docstring). The value as written is kept where it is one short line with no private
    name (`64 << 20`, `0x9E37...`, `SkipSample()`): it says more than the number."""
    try: src = Path(mod.__file__).read_text(encoding='utf-8')
    except Exception: return {}
    try: tree = ast.parse(src)
    except SyntaxError: return {}
    comments = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.COMMENT: comments[t.start[0]] = (t.start[1], t.string)
    except (tokenize.TokenError, IndentationError): pass
    lines = src.splitlines()

    def text(line_no):
        c = comments.get(line_no)
        return None if c is None or _CELL_MARK.match(c[1]) else c[1].lstrip('#').strip()

    def comment_of(node, nxt):
        first, last = node.lineno, node.end_lineno
        for ln in ((first, last) if last - first > 2 else range(first, last + 1)):
            t = text(ln)
            if t: return t
        above, ln = [], first - 1
        while ln >= 1 and comments.get(ln) and comments[ln][0] == 0 and text(ln):  # a comment block of whole lines
            above.insert(0, text(ln)); ln -= 1
        if above and (ln < 1 or not lines[ln - 1].strip() or _CELL_MARK.match(lines[ln - 1])): return ' '.join(above)
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            return ' '.join(inspect.cleandoc(nxt.value.value).split())
        return ''

    def written(node):
        if node is None: return None
        seg = ast.get_source_segment(src, node)
        if not seg or '\n' in seg or '#' in seg or len(seg) > 72 or _PRIVATE_ID.search(seg): return None
        return seg

    out = {}
    body = tree.body
    for i, node in enumerate(body):
        nxt = body[i + 1] if i + 1 < len(body) else None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, node.value)]
        elif isinstance(node, ast.Assign):
            pairs = []
            for tg in node.targets:
                if isinstance(tg, ast.Name): pairs.append((tg.id, node.value))
                elif isinstance(tg, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in tg.elts):
                    vals = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) and \
                        len(node.value.elts) == len(tg.elts) else [None] * len(tg.elts)
                    pairs += [(e.id, v) for e, v in zip(tg.elts, vals)]
        else: continue
        c = comment_of(node, nxt)
        for name, value in pairs:
            if name.startswith('_'): continue
            out[name] = (written(value), c, i)
    return out


def brief(value, width: int = 60) -> str | None:
    "A constant's value in at most about `width` characters: a literal's repr (a container's first items), else None."
    lit = (int, float, complex, str, bytes, bool, type(None))
    if isinstance(value, lit) and not isinstance(value, type):
        r = repr(value)
        return r if len(r) <= width else r[:width - 4] + '…' + r[-1:] if isinstance(value, (str, bytes)) else r[:width] + '…'
    if type(value) in (tuple, list, set, frozenset, dict):
        def item(x):  # a literal as its repr, a class or function by its name, anything else as '…'
            if isinstance(x, lit) or (type(x) in (tuple, list) and all(isinstance(y, lit) for y in x)): return repr(x)
            return x.__name__ if (inspect.isclass(x) or inspect.isroutine(x)) and hasattr(x, '__name__') else '…'
        pieces = [f'{item(k)}: {item(v)}' for k, v in value.items()] if isinstance(value, dict) else [item(x) for x in value]
        op, cl = ('{', '}') if isinstance(value, (dict, set)) else ('[', ']') if isinstance(value, list) else \
            ('frozenset({', '})') if isinstance(value, frozenset) else ('(', ',)' if len(value) == 1 else ')')
        if len(op) + len(', '.join(pieces)) + len(cl) <= width: return op + ', '.join(pieces) + cl
        shown = []
        for s in pieces:
            if len(op) + len(', '.join(shown + [s])) + 3 + len(cl) > width: break
            shown.append(s)
        return op + ', '.join(shown + ['…']) + cl if shown else f'{type(value).__name__} of {len(value)}'
    mod = getattr(type(value), '__module__', '')
    if mod in ('typing', 'types', 'typing_extensions'):  # an alias: `Union[List[str], ...]`
        r = repr(value).replace('typing.', '')
        return r if len(r) <= width else r[:width] + '…'
    return None


def constant_code(mod, name: str, written: str | None) -> str:
    "`NAME = value` as written or in brief, or `NAME: Type` for an instance of a public class (else the name alone)."
    value = getattr(mod, name)
    shown = written or brief(value)
    if shown: return f'{name} = {shown}'
    t = type(value).__qualname__
    return name if is_private(t) else f'{name}: {t}'


# ---------------------------------------------------------------- the pages

def _first_line(mod) -> str:
    "A module's one-line job: its docstring's first line (nbdev writes the notebook's description there)."
    d = (mod.__doc__ or '').strip()
    return ' '.join(inspect.cleandoc(d).split('\n\n')[0].split()) if d else ''


def module_page(key: str, name: str) -> str:
    "The page of a module: `reference/<package>/<rest of its name>` (`timmdata.streams.net` -> reference/streams/net)."
    parts = name.split('.')[1:]
    rest = parts[1:] if key != 'timm_data' else parts
    return f'reference/{SLUG.get(key, key)}/' + '/'.join(rest)


def reference_pages(pages: dict, lib: str = 'timmdata', doc_url: str = '') -> dict:
    """{'pages': {stem: markdown}, 'titles': {stem: title}, 'symbols': {nbdev url: 'reference/x/y.md#id'},
    'known': [...], 'unlisted': [module page stems: not in the sidebar], 'failed': [module: error]};
    `pages`: notebook path relative to nbs/ -> its page's md file."""
    modidx = importlib.import_module(f'{lib}._modidx').d
    syms = {k: v for m in modidx['syms'].values() for k, v in m.items()}
    by_pkg, failed, symbols = {}, [], {}
    for key, name in _modules(lib):
        try: mod = importlib.import_module(name)
        except Exception as e:
            failed.append(f'{name}: {type(e).__name__}: {e}')
            continue
        by_pkg.setdefault(key, []).append(mod)
    out, titles, unlisted = {}, {}, []
    index = ["The library's public names, module by module: each module's page gives every name's signature, "
             'docstring and parameters, and its constants. The pages under *Explanation* show the same entries beside '
             'what the stage does and why.', '']
    groups = PACKAGES + [(k, k, None) for k in by_pkg if k not in {p[0] for p in PACKAGES}]
    plan, where = {}, {}  # module -> (its page, names, constants); name -> [(object, 'page.md#anchor')] of every entry
    for key, _, _ in groups:
        for mod in sorted(by_pkg.get(key, ()), key=lambda m: m.__name__):
            consts = constants_of(mod)
            names = public_names(mod, syms, consts)
            page = f'reference/{SLUG.get(key, key)}' if mod.__name__ == f'{lib}.{key}' else module_page(key, mod.__name__)
            plan[mod.__name__] = (page, names, consts)
            for n in names: where.setdefault(n, []).append((getattr(mod, n), f'{page}.md#{mod.__name__.lower()}.{n.lower()}'))

    def elsewhere(mod, names):  # the public names a module imports from another: a line linking each to its entry
        others = [n for n in getattr(mod, '__all__', None) or [] if n not in names and not is_private(n)
                  and hasattr(mod, n) and not inspect.ismodule(getattr(mod, n))]
        if not others: return ''
        def link(n):
            at = next((a for o, a in where.get(n, ()) if o is getattr(mod, n)), None)
            return f'[`{n}`]({at})' if at else f'`{n}`'
        return 'Importable from here too, documented where they are defined: ' + ', '.join(map(link, others)) + '.'

    for key, title, _ in groups:
        mods = by_pkg.get(key)
        if not mods: continue
        stem = f'reference/{SLUG.get(key, key)}'
        titles[stem] = title
        group, listed, own = [], [], []
        for mod in sorted(mods, key=lambda m: m.__name__):
            page, names, consts = plan[mod.__name__]
            if page == stem:  # the package itself: its paragraph opens the group page, its own names follow the list
                if _first_line(mod): group.append(' '.join(inspect.cleandoc(mod.__doc__).split('\n\n')[0].split()))
                body = _module_body(mod, names, consts, syms, pages, doc_url, stem, symbols, level=3)
                own = [x for x in (body, elsewhere(mod, names)) if x]
                continue
            if not names and not _first_line(mod): continue
            titles[page] = mod.__name__
            unlisted.append(page)
            nb = _notebook_of(mod)
            job = _first_line(mod)
            head = [job] if job else []
            if nb and nb in pages: head.append(f'Explained on [its page]({pages[nb]}).')
            body = _module_body(mod, names, consts, syms, pages, doc_url, page, symbols, level=2)
            out[page] = '\n\n'.join(x for x in head + [_contents(mod, names), elsewhere(mod, names), body] if x) + '\n'
            listed.append((mod.__name__, page, job))
        if not listed and not own: continue
        short = lambda n: n.split('.', 2)[-1] if key != 'timm_data' else n.split('.', 1)[-1]  # its name in the package
        pkg = f'`{lib}.{key}`' if key != 'timm_data' else f'`{lib}`'
        group.append(f'| Module of {pkg} | What it does |\n| --- | --- |\n' + '\n'.join(
            f'| [`{short(n)}`]({p}.md) | {job.replace("|", chr(92) + "|")} |' for n, p, job in listed))
        if own: group += [f'## `{lib}.{key}` {{ #{lib}.{key} }}'] + own
        out[stem] = '\n\n'.join(group) + '\n'
        index.append(f'**[{title}]({stem}.md)**: ' + ', '.join(f'[`{short(n)}`]({p}.md)' for n, p, _ in listed) + '\n')
    titles['reference/index'] = 'API reference'
    out['reference/index'] = '\n'.join(index) + '\n'
    known = {v[0].replace('.html#', '.md#') for v in syms.values() if '#' in v[0]}
    return {'pages': out, 'titles': titles, 'symbols': symbols, 'known': sorted(known), 'unlisted': unlisted,
            'failed': failed}


def _contents(mod, names) -> str:
    "A line linking each entry of a module's page (the sidebar lists the reference's group pages, not its modules')."
    if len(names) < 4: return ''
    ents = [f'[`{n}`](#{mod.__name__.lower()}.{n.lower()})' for n in names if not is_data(getattr(mod, n))]
    if any(is_data(getattr(mod, n)) for n in names): ents.append(f'[constants](#{mod.__name__.lower()}-constants)')
    return '**On this page**: ' + ', '.join(ents)


def _module_body(mod, names, consts, syms, pages, doc_url, stem, symbols, level: int) -> str:
    "The entries of a module's names at heading `level` (methods one below), its constants last, a line each."
    body, lines = [], []
    for n in names:
        obj = getattr(mod, n)
        qn = f'{mod.__name__}.{n}'
        anchor = qn.lower()
        if is_data(obj):  # names one statement assigns (`READ, DECODE, OPS = 0, 1, 2  # ...`) share a line
            written, comment, stmt = consts[n]
            if lines and lines[-1][2] == stmt: lines[-1][0].append((constant_code(mod, n, written), anchor))
            else: lines.append(([(constant_code(mod, n, written), anchor)], comment, stmt))
            continue
        src = syms.get(qn)
        # the module's page is linked once, at its top: an entry says what it is, not "explained on its page" again
        e = entry_markdown(obj, n, level=level, anchor=anchor, source=source_url(obj) if src else None)
        if not e: continue
        body.append(e)
        if src: symbols[src[0].replace('.html#', '.md#')] = f'{stem}.md#{anchor}'
        if inspect.isclass(obj):
            for mn, mv in methods(obj):
                mq = f'{qn}.{mn}'
                msrc = syms.get(mq)
                e = entry_markdown(mv, f'{n}.{mn}', level=level + 1, anchor=mq.lower())
                if e:
                    body.append(e)
                    if msrc: symbols[msrc[0].replace('.html#', '.md#')] = f'{stem}.md#{mq.lower()}'
    if lines: body.append(f'{"#" * level} Constants {{ #{mod.__name__.lower()}-constants }}\n\n' + '\n'.join('- ' + constants_markdown(items, c) for items, c, _ in lines))
    return '\n\n'.join(body)
