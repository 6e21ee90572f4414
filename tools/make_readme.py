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

def render(nb):
    parts = []
    for cell in nb['cells']:
        src = ''.join(cell['source'])
        if cell['cell_type'] == 'markdown':
            parts.append(RELATIVE_IMAGE.sub(r'\1nbs/\2', src.strip('\n')))
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
