"""The site's reference: every public name of the library under its module, a page per package.

The notebook pages explain a stage and show the entries of the names it defines, in the order a reader needs them;
the reference lists them all, module by module, the way a library's API reference does: for each module its
one-line purpose and the page that explains it, then each public name (the module's `__all__`, defined there) with
its signature, docstring and parameter table (`showdoc.entry_markdown`), and a class's public methods under it.

`reference_pages(pages)` runs in a docs-build worker (it imports every module of the library) and returns the pages'
markdown and, for each symbol nbdev's doc links know (`_modidx`), the anchor of its entry here, so that a link to a
symbol whose notebook page shows no entry of it lands here instead."""
from __future__ import annotations
import importlib, inspect, pkgutil, re, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path: sys.path.insert(0, str(HERE))
from showdoc import entry_markdown, is_private, source_url, unwrap  # noqa: E402

# the packages, as the reference's pages, in the order of the data's way; the top-level modules are timm's map
PACKAGES = [('timm_data', "timm.data's modules", None), ('readers', 'Readers', 'readers'), ('pixels', 'Pixels', 'pixels'),
            ('store', 'The store', 'store'), ('streams', 'Shards and streams', 'streams'),
            ('engine', 'The engine', 'engine'), ('tools', 'Tools', 'tools'), ('core', 'Core', 'core')]
METHOD_DUNDERS = ('__call__', '__iter__', '__len__', '__getitem__')


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


def public_names(mod, modidx_syms: dict) -> list:
    "The module's public names defined there: `__all__` less private names and names it imports from elsewhere."
    names = []
    for n in getattr(mod, '__all__', None) or []:
        if is_private(n) or not hasattr(mod, n): continue
        obj = getattr(mod, n)
        if inspect.ismodule(obj): continue
        home = getattr(unwrap(obj), '__module__', None) if (inspect.isclass(obj) or callable(obj)) else None
        if f'{mod.__name__}.{n}' in modidx_syms or home in (None, mod.__name__) or not home.startswith('timmdata'):
            names.append(n)
    return names


def methods(cls) -> list:
    "A class's public methods and properties, in the order its body defines them."
    out = []
    for n, v in cls.__dict__.items():
        if (n.startswith('_') and n not in METHOD_DUNDERS) or not (
                inspect.isfunction(v) or isinstance(v, (property, classmethod, staticmethod))): continue
        if n in METHOD_DUNDERS and not (unwrap(v).__doc__ or '').strip(): continue
        out.append((n, v))
    return out


def reference_pages(pages: dict, lib: str = 'timmdata', doc_url: str = '') -> dict:
    """{'pages': {stem: markdown}, 'titles': {stem: title}, 'symbols': {nbdev url: 'reference/x.md#id'},
    'failed': [module: error]}; `pages`: notebook path relative to nbs/ -> its page's md file."""
    modidx = importlib.import_module(f'{lib}._modidx').d
    syms = {k: v for m in modidx['syms'].values() for k, v in m.items()}
    by_pkg, failed, symbols = {}, [], {}
    for key, name in _modules(lib):
        try: mod = importlib.import_module(name)
        except Exception as e:
            failed.append(f'{name}: {type(e).__name__}: {e}')
            continue
        by_pkg.setdefault(key, []).append(mod)
    out, titles = {}, {}
    index = ['The library\'s public names, module by module: each with its signature, docstring and parameters. '
             'The pages under *Explanation* show the same entries beside what the stage does and why.', '']
    for key, title, _ in PACKAGES + [(k, k, None) for k in by_pkg if k not in {p[0] for p in PACKAGES}]:
        mods = by_pkg.get(key)
        if not mods: continue
        stem = f'reference/{key}'
        titles[stem] = title
        body, toc = [], []
        for mod in sorted(mods, key=lambda m: m.__name__):
            names = public_names(mod, syms)
            if not names and not (mod.__doc__ or '').strip(): continue
            nb = _notebook_of(mod)
            doc = (inspect.cleandoc(mod.__doc__).split('\n\n')[0] if (mod.__doc__ or '').strip() else '')
            mid = mod.__name__.lower()
            body.append(f'## {mod.__name__} {{ #{mid} }}')
            if doc: body.append(' '.join(doc.split()))
            if nb and nb in pages: body.append(f'Explained on [its page]({pages[nb]}).')
            toc.append(f'- [`{mod.__name__}`](#{mid}): ' + (' '.join(doc.split()) if doc else f'{len(names)} names'))
            for n in names:
                obj = getattr(mod, n)
                qn = f'{mod.__name__}.{n}'
                anchor = qn.lower()
                src = syms.get(qn)
                explained = f'Explained on [its page]({doc_url}{src[0]}).' if src else None
                e = entry_markdown(obj, n, level=3, anchor=anchor, explained=explained, source=source_url(obj) if src else None)
                if not e: continue
                body.append(e)
                if src: symbols[src[0].replace('.html#', '.md#')] = f'{stem}.md#{anchor}'
                if inspect.isclass(obj):
                    for mn, mv in methods(obj):
                        mq = f'{qn}.{mn}'
                        msrc = syms.get(mq)
                        e = entry_markdown(mv, f'{n}.{mn}', level=4, anchor=mq.lower(),
                                           explained=f'Explained on [its page]({doc_url}{msrc[0]}).' if msrc else None)
                        if e:
                            body.append(e)
                            if msrc: symbols[msrc[0].replace('.html#', '.md#')] = f'{stem}.md#{mq.lower()}'
        out[stem] = '\n\n'.join(['<div class="doc-modules" markdown="1">', '\n'.join(toc), '</div>'] + body) + '\n'
        index.append(f'- [{title}]({key}.md): ' + ', '.join(f'`{m.__name__}`' for m in sorted(mods, key=lambda m: m.__name__)))
    titles['reference/index'] = 'API reference'
    out['reference/index'] = '\n'.join(index) + '\n'
    known = {v[0].replace('.html#', '.md#') for v in syms.values() if '#' in v[0]}
    return {'pages': out, 'titles': titles, 'symbols': symbols, 'known': sorted(known), 'failed': failed}
