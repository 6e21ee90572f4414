"""What tools/build_docs.sh prints: a summary and each warning of nbdev's processing in one line naming the notebook and
the cell, not nbdev's echo of the whole cell (a full build printed about 160 of them, 4,700 lines). A build of two
small notebooks in a temporary folder, no reference pages (seconds)."""
import importlib.util, json, os, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _notebook(cells):
    return {'cells': cells, 'metadata': {'kernelspec': {'display_name': 'python3', 'language': 'python', 'name': 'python3'}},
            'nbformat': 4, 'nbformat_minor': 5}


def _cell(kind, src, id):
    c = {'cell_type': kind, 'id': id, 'metadata': {}, 'source': src}
    return c if kind == 'markdown' else {**c, 'execution_count': None, 'outputs': []}


def test_warnings_one_line_each(tmp_path):
    lacks = [m for m in ('mkdocs', 'material', 'nbdev') if importlib.util.find_spec(m) is None]
    if lacks: pytest.skip(f'the docs build needs {", ".join(lacks)}: pip install -e ".[dev]"')
    nbs = tmp_path / 'nbs'; nbs.mkdir()
    (nbs / 'index.ipynb').write_text(json.dumps(_notebook([_cell('markdown', '# Home\n> home page', 'h0')])))
    mixed = '#| code-fold: true\nfrom pathlib import Path\nhere = Path(".")\nSECOND_LINE_OF_A_MIXED_CELL = 1'
    (nbs / '01_mixed.ipynb').write_text(json.dumps(_notebook([
        _cell('markdown', '# Mixed\n> imports and code in a cell', 'm0'),
        _cell('code', '#| export\ndef twice(x): return 2 * x', 'e1'),
        _cell('code', mixed, 'x2'),
        _cell('code', '#| export\nimport warnings\nwarnings.warn("an odd thing\\nsaid over two lines")', 'w3'),
    ])))
    import subprocess
    env = {**os.environ, 'PATH': str(Path(sys.executable).parent) + os.pathsep + os.environ.get('PATH', '')}
    r = subprocess.run(['bash', str(ROOT / 'tools' / 'build_docs.sh'), str(tmp_path / 'site'), '--nbs', str(nbs),
                        '--no-reference'], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert 'SECOND_LINE_OF_A_MIXED_CELL' not in out and 'See FAQ' not in out, out  # no cell echoed
    summary = [l for l in out.splitlines() if l.startswith('docs: 2 notebooks processed')]
    assert len(summary) == 1 and summary[0].endswith('2 warnings, a line each:'), out
    said = [l for l in out.splitlines() if l.startswith('  01_mixed.ipynb ')]
    assert len(said) == 2, out
    assert said[0] == "  01_mixed.ipynb cell 2 (id x2), 'from pathlib import Path': imports and other code in one cell (nbdev's warning)", out
    assert 'UserWarning: an odd thing said over two lines' in said[1], out
    assert len(out.splitlines()) == 6, out  # started, the summary and its 2 lines, MkDocs, written
