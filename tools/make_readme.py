"""Writes README.md from nbs/index.ipynb (nbdev_readme needs Quarto, which this project cannot rely on).

`--check` exits 1 when README.md differs from what index.ipynb would give."""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r'^\s*#\s*\|\s*(\w[\w-]*)(.*)$')

def directives(src):
    return {m.group(1): m.group(2).strip() for m in map(DIRECTIVE.match, src.splitlines()) if m}

# a picture the notebook links to by a path relative to nbs/ (the docs copy nbs/images/): README.md is at the root
RELATIVE_IMAGE = re.compile(r'(!\[[^\]]*\]\()(?![a-z][a-z0-9+.-]*:|/|#)([^)\s]+)')

def strip_directives(src):
    return '\n'.join(l for l in src.splitlines() if not DIRECTIVE.match(l)).strip('\n')

def output_text(out):
    if out.get('output_type') == 'stream': return ''.join(out.get('text', ''))
    data = out.get('data', {})
    if 'text/markdown' in data: return None  # rendered below as markdown
    return ''.join(data.get('text/plain', ''))

NOTEBOOK_LINK = re.compile(r'(\]\()(?![a-z][a-z0-9+.-]*:|/|#)([^)\s]+\.ipynb)')
LAYOUT_MARK = '<!-- layout: made from the tree by tools/make_readme.py -->'


def _doc(path: Path) -> tuple:
    "(the module's docstring, the notebook it is made from) read from a generated module's text (nothing imported)."
    import ast
    text = path.read_text(encoding='utf-8')
    doc = ast.get_docstring(ast.parse(text)) or ''
    m = re.search(r'File to edit: (?:\.\./)+(nbs/\S+\.ipynb)', text)
    return ' '.join(doc.split()), (m.group(1) if m else '')


def layout_markdown(root: Path = ROOT) -> str:
    """The README's layout, made from the tree: timm's map (the top of `timmdata/`), then each package of timmdata's own
    machinery with the paragraph its `__init__` gives, each module with its notebook and its job (its docstring)."""
    lib, out = root / 'timmdata', []
    def rows(mods, prefix):
        t = ['| module | notebook | job |', '|---|---|---|']
        for f in mods:
            doc, nb = _doc(f)
            name = prefix + (f.parent.name if f.name == '__init__.py' else f.stem)
            t.append(f"| `{name}` | `{nb}` | {doc.replace('|', '/')} |")
        return t
    top = sorted(f for f in lib.glob('*.py') if not f.name.startswith('_'))
    timm_pkgs = [lib / 'readers']  # timm's own package path (timm.data.readers)
    out += ["**timm's map** (`timmdata/`): the modules `timm.data` has, under timm's names; `from timm.data.X import Y` "
            "becomes `from timmdata.X import Y`.", ''] + rows(top, '')
    for pkg in timm_pkgs:
        mods = [pkg / '__init__.py'] + sorted(f for f in pkg.glob('*.py') if not f.name.startswith('_'))
        out += ['', f'**`timmdata.{pkg.name}`**: {_doc(pkg / "__init__.py")[0].split(": ", 1)[-1]}', ''] + rows(mods[1:], f'{pkg.name}.')
    for pkg in sorted(p for p in lib.iterdir() if (p / '__init__.py').exists() and p not in timm_pkgs):
        mods = sorted(f for f in pkg.glob('*.py') if not f.name.startswith('_'))
        out += ['', f'**`timmdata.{pkg.name}`**: {_doc(pkg / "__init__.py")[0].split(": ", 1)[-1]}', ''] + rows(mods, f'{pkg.name}.')
    return '\n'.join(out)


def render(nb):
    parts = []
    for cell in nb['cells']:
        src = ''.join(cell['source'])
        if cell['cell_type'] == 'markdown':
            src = src.replace(LAYOUT_MARK, layout_markdown()) if LAYOUT_MARK in src else src
            src = RELATIVE_IMAGE.sub(r'\1nbs/\2', src.strip('\n'))
            parts.append(NOTEBOOK_LINK.sub(r'\1nbs/\2', src))  # a link to a page: its notebook, from the root
            continue
        if cell['cell_type'] != 'code': continue
        d = directives(src)
        if 'hide' in d or 'export' in d or 'exporti' in d: continue
        code = strip_directives(src)
        if code and 'hide_input' not in d and 'echo' not in d:
            parts.append(f'```python\n{code}\n```')
        if 'hide_output' in d or 'output' in d: continue
        for out in cell.get('outputs', []):
            if any(k.startswith('image/') for k in out.get('data', {})): continue  # pictures are on the docs site
            md = out.get('data', {}).get('text/markdown')
            if md: parts.append(''.join(md).strip('\n')); continue
            txt = output_text(out)
            if txt: parts.append('    ' + txt.rstrip('\n').replace('\n', '\n    '))
    return '\n\n'.join(p for p in parts if p) + '\n'

def main(argv):
    nb = json.loads((ROOT / 'nbs' / 'index.ipynb').read_text(encoding='utf-8'))
    text = render(nb)
    readme = ROOT / 'README.md'
    if '--check' in argv:
        if not readme.exists() or readme.read_text(encoding='utf-8') != text:
            print('README.md differs from nbs/index.ipynb: run `make readme` and commit it', file=sys.stderr)
            return 1
        print('README.md matches nbs/index.ipynb')
        return 0
    readme.write_text(text, encoding='utf-8')
    print('wrote README.md')
    return 0

if __name__ == '__main__': sys.exit(main(sys.argv[1:]))
