"""Moves top-level import lines out of code cells that also do other work, into a cell of their own just before.

nbdev's docs processing executes every cell that contains an import (without the cells before it), so an
import mixed with test code breaks the docs build. Exported cells are left alone.
Usage: python tools/split_import_cells.py nbs/*.ipynb"""
import json, re, sys, uuid

IMPORT = re.compile(r'^(from\s+\S+\s+import\s+|import\s+)')
DIRECTIVE = re.compile(r'^#\s*\|')

def split_cell(src):
    lines = src.splitlines()
    directives = [l for l in lines if DIRECTIVE.match(l)]
    if any(re.match(r'#\s*\|\s*(export|exporti|exports|default_exp)', d) for d in directives): return None
    imports, rest, i = [], [], 0
    while i < len(lines):
        l = lines[i]
        if IMPORT.match(l):
            block = [l]
            if '(' in l and ')' not in l:  # parenthesised import over several lines
                while i + 1 < len(lines) and ')' not in lines[i]:
                    i += 1; block.append(lines[i])
            while block[-1].rstrip().endswith('\\') and i + 1 < len(lines):
                i += 1; block.append(lines[i])
            imports += block
        elif not DIRECTIVE.match(l): rest.append(l)
        i += 1
    code = [l for l in rest if l.strip() and not l.lstrip().startswith('#')]
    if not imports or not code: return None
    return '\n'.join(directives + imports), '\n'.join(directives + rest).strip('\n')

def process(path):
    nb = json.load(open(path, encoding='utf-8'))
    out, n = [], 0
    for cell in nb['cells']:
        if cell['cell_type'] == 'code':
            r = split_cell(''.join(cell['source']))
            if r:
                imp, rest = r
                out.append({'cell_type': 'code', 'execution_count': None, 'id': uuid.uuid4().hex[:8], 'metadata': {}, 'outputs': [], 'source': imp})
                cell['source'] = rest; n += 1
        out.append(cell)
    if n:
        nb['cells'] = out
        with open(path, 'w', encoding='utf-8') as f: json.dump(nb, f, indent=1, ensure_ascii=False); f.write('\n')
    return n

if __name__ == '__main__':
    for p in sys.argv[1:]: print(p, process(p), 'cells split')
