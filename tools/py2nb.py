"""Authoring aid: turns a percent-format script (`# %%` code cells, `# %% [markdown]` prose cells) into a notebook.

The notebook is the source of truth once written; this only saves typing JSON by hand.
Usage: python tools/py2nb.py draft.py nbs/NN_name.ipynb [--execute]"""
import sys, re
import nbformat

def convert(text):
    cells, kind, buf = [], None, []
    def flush():
        if kind is None: return
        src = '\n'.join(buf).strip('\n')
        if kind == 'markdown':
            src = '\n'.join(re.sub(r'^# ?', '', l) for l in src.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(src))
        elif src: cells.append(nbformat.v4.new_code_cell(src))
    for line in text.splitlines():
        m = re.match(r'^# %%(.*)$', line)
        if m:
            flush(); buf = []
            kind = 'markdown' if '[markdown]' in m.group(1) else 'code'
        else: buf.append(line)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {'kernelspec': {'display_name': 'python3', 'language': 'python', 'name': 'python3'}}
    return nb

if __name__ == '__main__':
    src, dst = sys.argv[1], sys.argv[2]
    nb = convert(open(src, encoding='utf-8').read())
    if '--execute' in sys.argv:
        from nbclient import NotebookClient
        import os
        NotebookClient(nb, timeout=1200, kernel_name='python3', resources={'metadata': {'path': os.path.dirname(os.path.abspath(dst))}}).execute()
    nbformat.write(nb, dst)
    print('wrote', dst)
