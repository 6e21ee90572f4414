"""The "Get started" and "How-to" pages work as a reader copies them: each page's visible code cells, pasted one after
the other into a script and run with this Python in a fresh, empty folder, exit 0. So a page makes its own data in a
line the reader sees, defines everything its visible code uses in visible cells, and runs no `!` lines (shell
commands stand in shell blocks in the text; a hidden cell runs them for the page's output). Its visible code carries no `# fmt: skip` and runs on the oldest Python that
settings.ini declares (no `zip(..., strict=True)`).

Cells the page hides (`#| hide`, `#| echo: false`) are left out, as the reader never sees them. Cells flagged for
something this machine lacks are left out too, and the test's id says which: `#| cuda` without a CUDA device, and the
optional extras' flags (`#| codec`, `#| tensorboard`, ...: tools/nbtest.py's EXTRAS) where their package is not
installed. A page whose script takes more than about 20 s is marked slow (run with TIMMDATA_SLOW=1)."""

import ast, configparser, importlib.util, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

import pytest
nbformat = pytest.importorskip('nbformat')  # the notebooks' reader (nbdev's dev needs; a bare machine may lack it)
import torch

pytestmark = pytest.mark.slow  # make test-all: each page run as a reader pastes it, in a fresh interpreter

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO / 'nbs' / 'start').glob('*.ipynb')) + sorted((REPO / 'nbs' / 'howto').glob('*.ipynb'))
SLOW = {'10_lightning_accelerate'}  # more than 20 s as a script on a 2-core machine (26 s); the others take 4 to 9 s
HIDDEN = {'hide', 'echo: false', 'include: false'}  # the directives that keep a cell's code off the page
_settings = configparser.ConfigParser()
_settings.read(REPO / 'settings.ini')
MIN_PY = tuple(int(n) for n in _settings['DEFAULT']['min_python'].split('.'))  # (3, 9)


def _name(page: Path) -> str:
    return str(page.relative_to(REPO)) if REPO in page.parents else page.name


def _extras() -> dict:
    "tools/nbtest.py's test flags named after the optional extras -> the package each needs."
    src = (REPO / 'tools' / 'nbtest.py').read_text()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.Assign) and n.targets[0].id == 'EXTRAS')
    return ast.literal_eval(node.value)


def unavailable() -> set:
    "The cell flags whose cells cannot run here: `cuda` without CUDA, an extra's flag without its package."
    out = {f for f, pkg in _extras().items() if importlib.util.find_spec(pkg) is None}
    return out | ({'cuda'} if not torch.cuda.is_available() else set())


def directives(src: str) -> list:
    "A cell's leading `#|` lines, as `name` or `name: value`."
    out = []
    for line in src.splitlines():
        if not line.startswith('#|'):
            break
        out.append(re.sub(r'\s*:\s*', ': ', line[2:].strip()))
    return out


def visible_cells(page: Path) -> list:
    "The page's code cells a reader sees: (their source without directives, their flags)."
    cells = []
    for c in nbformat.read(page, as_version=4).cells:
        if c.cell_type != 'code':
            continue
        d = directives(c.source)
        if HIDDEN & set(d):
            continue
        body = '\n'.join(c.source.splitlines()[len(d) :])
        cells.append((body, {x.split(':')[0] for x in d}))
    return cells


def script(page: Path, skip: set) -> str:
    "The visible code cells as a reader pastes them, one after the other; cells flagged with one of `skip` left out."
    return '\n\n'.join(body for body, flags in visible_cells(page) if not flags & skip) + '\n'


def problems(page: Path) -> list:
    "What a visible code cell must not hold: `# fmt: skip`, `!` or `%` lines, syntax or calls newer than MIN_PY."
    out = []
    for k, (body, _) in enumerate(visible_cells(page)):
        where = f'{_name(page)} visible code cell {k}'
        lines = body.splitlines()
        out += [f'{where}: `# fmt: skip` in {ln.strip()!r}' for ln in lines if '# fmt: skip' in ln]
        out += [f'{where}: a notebook-only line {ln.strip()!r}' for ln in lines if ln.lstrip().startswith(('!', '%'))]
        code = '\n'.join('pass' if ln.lstrip().startswith(('!', '%')) else ln for ln in lines)
        try:
            tree = ast.parse(code, feature_version=MIN_PY[:2])
        except SyntaxError as e:
            out.append(f'{where}: not Python {".".join(map(str, MIN_PY))} syntax: {e}')
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == 'zip':
                if any(kw.arg == 'strict' for kw in n.keywords):
                    out.append(f'{where}: zip(..., strict=) needs Python 3.10 (line {n.lineno})')
    return out


def run_as_copied(page: Path, folder: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    "Runs the page's visible code as a script in `folder` (empty), as a reader would: a fresh process, no notebook."
    src = script(page, unavailable())
    path = folder.parent / f'{folder.name}.py'
    path.write_text(src)
    # the page's temporary files in a folder of their own with a short path, as a user's /tmp: multiprocessing puts
    # its AF_UNIX sockets there, and a socket's path may hold at most 107 bytes (a test's folder is deeper)
    tmp = tempfile.mkdtemp(prefix='page-', dir='/tmp' if os.path.isdir('/tmp') else None)
    env = {k: v for k, v in os.environ.items() if not k.startswith('TIMMDATA_')}
    env.update(TMPDIR=tmp, MPLBACKEND='Agg', PYTHONUNBUFFERED='1')
    try:
        return subprocess.run(
            [sys.executable, str(path)], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _param(page: Path):
    skipped = sorted({f for _, flags in visible_cells(page) for f in flags} & unavailable())
    marks = [pytest.mark.slow] if page.stem in SLOW else []
    name = page.parent.name + '/' + page.stem + (f' (cells flagged {", ".join(skipped)} left out)' if skipped else '')
    return pytest.param(page, marks=marks, id=name)


@pytest.mark.slow
@pytest.mark.parametrize('page', [_param(p) for p in PAGES])
def test_page_runs_as_copied(page, tmp_path):
    folder = tmp_path / 'reader'
    folder.mkdir()
    t0 = time.time()
    out = run_as_copied(page, folder)
    assert out.returncode == 0, (
        f'{_name(page)}: its visible code, run as a script in an empty folder, exits {out.returncode} '
        f'after {time.time() - t0:.0f} s:\n{out.stderr[-3000:]}'
    )


def test_pages_show_no_notebook_only_code():
    "No `# fmt: skip`, no `!` lines, nothing newer than settings.ini's min_python in the pages' visible code."
    found = [p for page in PAGES for p in problems(page)]
    assert not found, '\n'.join(found)


def test_the_page_checks_can_fail(tmp_path):
    "Each check catches what it is for, on a page made to break it."
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("#| hide\nfrom pathlib import Path\ntmp = Path('.')"),
        nbformat.v4.new_code_cell("print(tmp)  # defined by a hidden cell only"),
        nbformat.v4.new_code_cell("x = [1,  2]  # fmt: skip\n!timmdata info\nlist(zip(x, x, strict=True))"),
        nbformat.v4.new_code_cell("#| echo: false\nraise SystemExit(3)"),
    ]
    page = tmp_path / 'page.ipynb'
    nbformat.write(nb, page)
    assert [f for _, f in visible_cells(page)] == [set(), set()]
    found = '\n'.join(problems(page))
    assert '# fmt: skip' in found and 'notebook-only line' in found and 'zip(..., strict=)' in found, found
    (tmp_path / 'reader').mkdir()
    out = run_as_copied(page, tmp_path / 'reader', timeout=60)
    assert out.returncode != 0 and 'SyntaxError' in out.stderr, out.stderr  # the `!` line
    nb.cells[2].source = 'pass'
    nbformat.write(nb, page)
    (tmp_path / 'reader2').mkdir()
    out = run_as_copied(page, tmp_path / 'reader2', timeout=60)
    assert out.returncode != 0 and "NameError: name 'tmp'" in out.stderr, out.stderr
