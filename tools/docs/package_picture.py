"""The picture a package's page opens with: its modules as boxes (each with its job's first words and its size in
statements), the imports between them as arrows, each module above what it imports, and the packages it stands on.

    from package_picture import draw   # nbs/<package>/index.ipynb, a cell shown without its code (`#| echo: false`)
    draw('net')

Read from the generated sources with `ast` (nothing of timmdata imported), so the picture is the code as it is."""
from __future__ import annotations
import ast, sys, textwrap
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the one parser of the library's imports
from imports import LIB, imports, modules  # noqa: E402


def package_modules(package: str) -> dict:
    "module name -> (statements, first line of its docstring, modules of the package it imports, packages outside it it imports)."
    out, mods = {}, set(modules())
    for p in sorted((LIB / package).glob('*.py')):
        if p.stem.startswith('_'):
            continue
        tree = ast.parse(p.read_text(encoding='utf-8'))
        doc = (ast.get_docstring(tree) or '').split('\n')[0]
        deps = {m for m, _ in imports(p.relative_to(LIB).as_posix(), tree, mods)}
        inside = {d.split('.')[1] for d in deps if d.startswith(package + '.') and d.count('.') >= 1}
        outside = {d.split('.')[0] for d in deps if d and not d.startswith(package + '.') and d.split('.')[0] != package}
        out[p.stem] = (sum(isinstance(n, ast.stmt) for n in ast.walk(tree)), doc, inside - {p.stem}, outside)
    return out


def floors(mods: dict) -> dict:
    "Each module's floor inside the package: 0 for one that imports none of its neighbours, else one above the highest it imports."
    memo = {}

    def f(m, seen=()):
        if m not in memo:
            memo[m] = 1 + max((f(d, seen + (m,)) for d in mods[m][2] if d in mods and d not in seen), default=-1)
        return memo[m]

    return {m: f(m) for m in mods}


def draw(package: str, width: float = 9.0):
    "The package's modules, each above what it imports, with the arrows between them and what it stands on."
    mods = package_modules(package)
    fl = floors(mods)
    top = max(fl.values(), default=0)
    per_row = 5  # a floor of more modules is drawn as several rows, so the boxes keep a readable width
    rows = [r[i : i + per_row] for k in range(top + 1) for r in [sorted(m for m in mods if fl[m] == k)] for i in range(0, max(len(r), 1), per_row)]
    rows = [r for r in rows if r]
    top = len(rows) - 1
    wide = max(len(r) for r in rows)
    width = max(width, 2.3 * wide)  # a wide floor widens the picture, not the boxes' text
    fig, ax = plt.subplots(figsize=(width, 1.15 * (top + 1) + 0.7))
    at, bw, bh = {}, min(2.6, (width - 0.4) / wide - 0.25), 0.78
    for y, row in enumerate(rows):
        for j, m in enumerate(row):
            x = (j + 0.5) * width / len(row)
            at[m] = (x, y)
            n, doc, _, _ = mods[m]
            ax.add_patch(FancyBboxPatch((x - bw / 2, y - bh / 2), bw, bh, boxstyle='round,pad=0.02', fc='#e8eef7', ec='#345'))
            ax.text(x, y + 0.2, m, ha='center', va='center', fontsize=9, weight='bold')
            words = textwrap.shorten(doc.replace('`', ''), 66 if bw > 2.2 else 48, placeholder='...')
            ax.text(x, y - 0.1, textwrap.fill(words, max(18, min(34, int(bw * 13)))), ha='center', va='center', fontsize=6.5, color='#333')
            ax.text(x + bw / 2 - 0.05, y - bh / 2 + 0.06, f'{n}', ha='right', va='bottom', fontsize=6, color='#777')
    for m, (_, _, inside, _) in mods.items():
        for d in inside:
            if d in at:
                (x0, y0), (x1, y1) = at[m], at[d]
                ax.add_patch(FancyArrowPatch((x0, y0 - bh / 2), (x1, y1 + bh / 2), arrowstyle='-|>', mutation_scale=9,
                                             color='#678', lw=0.8, connectionstyle='arc3,rad=0.08'))
    below = sorted(set().union(*(o for *_, o in mods.values())) - {'_native'})
    ax.text(width / 2, -0.85, f'stands on: {", ".join(below)}' if below else 'stands on nothing else of timmdata',
            ha='center', va='center', fontsize=8, color='#555')
    ax.set_xlim(0, width)
    ax.set_ylim(-1.1, top + 0.55)
    ax.axis('off')
    ax.set_title(f'timmdata.{package}: each module above what it imports (the number: its statements)', fontsize=9)
    plt.tight_layout()
    plt.show()
