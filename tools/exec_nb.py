"""Executes a notebook in place (saving outputs for the docs), skipping cells flagged `#| cuda` (or the flags given).

Usage: python tools/exec_nb.py nbs/NN_name.ipynb [flag ...]"""
import sys, os, copy, nbformat
from nbclient import NotebookClient
path = sys.argv[1]; flags = sys.argv[2:] or ['cuda']
nb = nbformat.read(path, as_version=4)
run = copy.deepcopy(nb)
def directives(src):
    "The flags of a cell's leading `#|` lines (`#| hide` then `#| cuda`: both)."
    out = []
    for line in src.splitlines():
        if not line.startswith('#|'): break
        out.append(line[2:].strip().split(':')[0].strip())
    return out
skip = [i for i, c in enumerate(run.cells) if c.cell_type == 'code' and set(flags) & set(directives(c.source))]
for i in skip: run.cells[i].source = 'pass'
NotebookClient(run, timeout=1200, kernel_name='python3', resources={'metadata': {'path': os.path.dirname(os.path.abspath(path))}}).execute()
for i, c in enumerate(run.cells):
    if c.cell_type == 'code' and i not in skip:
        nb.cells[i].outputs = c.outputs; nb.cells[i].execution_count = c.execution_count
nbformat.write(nb, path); print('executed', path, 'skipped', len(skip))
