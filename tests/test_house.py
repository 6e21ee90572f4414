"""The house rules of issue 27, checked on the generated sources and the notebooks (nothing of timmdata is imported):
a class is read in one place (no `@patch` on a class of the patching module), no `locals()` hand-off, environment
variables read in one module, torch's private API in one module, no import circle (the package included), seams
declared and not probed (no getattr/hasattr for a method a protocol declares), and notebooks numbered in the data's way (a notebook imports only lower-numbered ones). Issue 42's page rules: every page of the data's way has a picture, no page opens
with a wall of tests, export cells of at most `MAX_EXPORT_LINES` lines; issue 57: no page documents a module `__getattr__`/`__dir__`. Each failure names file:line (or notebook and cell)."""
import ast, functools, json, re, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB, NBS = ROOT / 'timmdata', ROOT / 'nbs'
sys.path.insert(0, str(ROOT / 'tools'))
import imports as parser  # noqa: E402  (tools/imports.py: the one parser of the library's imports)

SETTINGS = 'core/settings.py'  # the one module that reads environment variables
TORCH_COMPAT = 'core/torch_compat.py'  # the one module that touches torch's private API
TORCH_PRIVATE = {'_iterator', '_workers', '_shutdown_workers', '_new_shared', 'default_generators'}
DECLARED = {  # a method other stages rely on: the protocol that declares it (test it with isinstance, not getattr/hasattr)
    'set_epoch': 'timmdata.core.runtime.SetsEpoch (pass it on with runtime.pass_epoch)', 'stats': 'timmdata.engine.threads.CountsTime',
    'set_loader_cfg': 'timmdata.streams.streaming.SplitsOverWorkers', 'samples_per_worker': 'timmdata.streams.streaming.EvenOverWorkers',
    'workers': 'timmdata.core.torch_compat.WrapsWorkers', 'shutdown': 'timmdata.core.torch_compat.WrapsWorkers'}


@functools.lru_cache(maxsize=1)
def _parsed() -> tuple:
    return tuple((p.relative_to(LIB).as_posix(), ast.parse(p.read_text(encoding='utf-8'))) for p in sorted(LIB.rglob('*.py'))
                 if p.name != '_modidx.py' and '__pycache__' not in p.parts)


def sources() -> dict:
    """file name: parsed module, for every generated module (the package's __init__ included). Parsed once per run (the
    checks only read the trees; each test parsing the library again cost ~1 s), a new dict for each caller."""
    return dict(_parsed())


def module_name(name: str) -> str:
    "'readers/core.py' -> 'readers.core'; 'readers/__init__.py' -> 'readers'; the package's own '__init__.py' -> '__init__'."
    return parser.module_name(name) or '__init__'


def patched_own_classes(name: str, tree: ast.Module) -> list:
    "file:line of each `@patch`/`@patch_to` function whose class (the type of its first argument) this module defines."
    own = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)): continue
        for d in node.decorator_list:
            f = d.func if isinstance(d, ast.Call) else d
            deco = f.attr if isinstance(f, ast.Attribute) else getattr(f, 'id', None)
            if deco == 'patch' and node.args.args and node.args.args[0].annotation is not None:
                targets = {n.id for n in ast.walk(node.args.args[0].annotation) if isinstance(n, ast.Name)}  # A, A|B, (A, B)
            elif deco == 'patch_to' and isinstance(d, ast.Call) and d.args:
                targets = {n.id for n in ast.walk(d.args[0]) if isinstance(n, ast.Name)}
            else: continue
            out += [f'timmdata/{name}:{node.lineno}: @{deco} {node.name} on {t}, a class of this module: move it into the class body'
                    for t in sorted(targets & own)]
    return out


def calls_locals(name: str, tree: ast.Module) -> list:
    return [f'timmdata/{name}:{n.lineno}: locals() hands a function\'s variables on; pass the arguments by name'
            for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == 'locals']


def reads_environment(name: str, tree: ast.Module) -> list:
    "os.environ / os.getenv / os.putenv / os.unsetenv / environ imported from os, anywhere but the settings module."
    if name == SETTINGS: return []
    hits = [n.lineno for n in ast.walk(tree)
            if (isinstance(n, ast.Attribute) and n.attr in ('environ', 'getenv', 'putenv', 'unsetenv', 'environb'))
            or (isinstance(n, ast.ImportFrom) and n.module == 'os' and any(a.name in ('environ', 'getenv') for a in n.names))]
    return [f'timmdata/{name}:{ln}: the environment is read in timmdata/{SETTINGS} only; take the setting from there' for ln in hits]


def torch_private(name: str, tree: ast.Module) -> list:
    if name == TORCH_COMPAT: return []
    return [f'timmdata/{name}:{n.lineno}: torch private API .{n.attr} belongs in timmdata/{TORCH_COMPAT}'
            for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in TORCH_PRIVATE]


def probes(name: str, tree: ast.Module) -> list:
    "file:line of each getattr/hasattr of a declared method (`DECLARED`) by its name."
    return [f"timmdata/{name}:{n.lineno}: probes {n.args[1].value!r}: declared by {DECLARED[n.args[1].value]}; use isinstance"
            for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ('getattr', 'hasattr')
            and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and n.args[1].value in DECLARED
            and not DECLARED[n.args[1].value].startswith(f'timmdata.{name[:-3].replace("/", ".")}.')]  # the declaring module tests its seam


def import_graph(srcs: dict) -> dict:
    """module: the timmdata modules it imports (at the top or inside a function, importlib by a constant name too); the
    package itself is '__init__', reached by `import timmdata` or `from timmdata import NAME` of a name that is not a
    module; the package's lazy export table (a string of `from timmdata.X import ...` lines) counts as its imports."""
    mods = {parser.module_name(n) for n in srcs}
    return {module_name(name): {d or '__init__' for d, _ in parser.imports(name, tree, mods) if d in mods and d != parser.module_name(name)}
            for name, tree in srcs.items()}


def circles(graph: dict) -> list:
    "Every import circle found by a depth-first walk, as 'a -> b -> a'."
    out, state = [], {}
    def visit(n, stack):
        state[n] = 'open'
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 'open': out.append(' -> '.join(stack[stack.index(d):] + [n, d]) if d in stack else f'{n} -> {d}')
            elif d not in state: visit(d, stack + [n])
        state[n] = 'done'
    for n in sorted(graph):
        if n not in state: visit(n, [])
    return out


def nb_key(name: str) -> tuple:
    "'27b_name.ipynb' -> (27, 'b'), '37aa_name.ipynb' -> (37, 'aa'): the order notebooks are read in."
    m = re.match(r'(\d+)([a-z]*)_', name)
    return (int(m.group(1)), m.group(2)) if m else None


def notebook_imports(path: Path) -> tuple:
    "(the notebook's default_exp module, [(module imported, cell index)]) from every code cell (exported and tests)."
    exp, deps = None, []
    for i, c in enumerate(json.loads(path.read_text(encoding='utf-8'))['cells']):
        if c['cell_type'] != 'code': continue
        src = ''.join(c['source'])
        m = re.search(r'^#\|\s*default_exp\s+(\S+)', src, re.M)
        if m: exp = m.group(1)
        for m in re.finditer(r'^\s*(?:from\s+(?:timmdata\.|\.)([\w.]+)\s+import|import\s+timmdata\.([\w.]+))', src, re.M):
            deps.append((m.group(1) or m.group(2), i))
    return exp, deps


def notebooks_out_of_order(nbs: Path = NBS) -> list:
    paths = [p for p in sorted(nbs.rglob('*.ipynb')) if nb_key(p.name)]  # nbs/ and its package folders
    info = {p.relative_to(nbs).as_posix(): notebook_imports(p) for p in paths}
    home = {exp: name for name, (exp, _) in info.items() if exp}
    out = []
    for name, (exp, deps) in info.items():
        for dep, cell in deps:
            other = home.get(dep) or next((home[d] for d in home if dep.startswith(d + '.')), None)
            if other and other != name and nb_key(Path(other).name) >= nb_key(Path(name).name):
                out.append(f'nbs/{name} (cell {cell}) imports {dep} from nbs/{other}: a notebook imports only lower-numbered '
                           f'ones (renumber one of them)')
    return sorted(set(out))


def test_no_patch_on_own_class():
    bad = [f for name, tree in sources().items() for f in patched_own_classes(name, tree)]
    assert not bad, f'{len(bad)} methods patched onto their own module\'s classes:\n' + '\n'.join(bad)


def test_no_locals_hand_off():
    bad = [f for name, tree in sources().items() for f in calls_locals(name, tree)]
    assert not bad, '\n'.join(bad)


def test_environment_read_in_settings_only():
    bad = [f for name, tree in sources().items() for f in reads_environment(name, tree)]
    assert not bad, '\n'.join(bad)


def test_torch_private_api_in_one_module():
    bad = [f for name, tree in sources().items() for f in torch_private(name, tree)]
    assert not bad, '\n'.join(bad)


def test_seams_declared_not_probed():
    bad = [f for name, tree in sources().items() for f in probes(name, tree)]
    assert not bad, '\n'.join(bad)


def test_no_import_circle_package_included():
    found = circles(import_graph(sources()))
    assert not found, 'import circles:\n' + '\n'.join(found)


def test_notebooks_import_only_lower_numbers():
    bad = notebooks_out_of_order()
    assert not bad, '\n'.join(bad)


def test_the_house_checks_can_fail(tmp_path):
    "Each check above finds what it looks for in a small made-up module and notebook (so a pass above means something)."
    tree = ast.parse('import os\nfrom fastcore.basics import patch\nclass A: pass\nclass B(A): pass\n'
                     '@patch\ndef f(self: A|int): pass\n@patch\ndef g(self: str): pass\n'
                     'def h(): return dict(locals()), os.environ.get("X"), os.getenv("Y")\n'
                     'def k(dl, s): dl._iterator._shutdown_workers(); torch.cuda.default_generators\n'
                     'def m():\n    import timmdata\n'
                     'def p(s): return callable(getattr(s, "set_epoch", None)), hasattr(s, "stats"), getattr(s, "other", 0)\n')
    assert patched_own_classes('m.py', tree) == ['timmdata/m.py:6: @patch f on A, a class of this module: move it into the class body']
    assert [f.split(':')[1] for f in calls_locals('m.py', tree)] == ['9']
    assert [f.split(':')[1] for f in reads_environment('m.py', tree)] == ['9', '9'] and reads_environment(SETTINGS, tree) == []
    assert sorted(f.split(' .')[1].split(' ')[0] for f in torch_private('m.py', tree)) == ['_iterator', '_shutdown_workers', 'default_generators']
    assert sorted(f.split(': ')[1] for f in probes('m.py', tree)) == ["probes 'set_epoch'", "probes 'stats'"]
    srcs = {'__init__.py': ast.parse('E = """\nfrom timmdata.a import x\n"""'), 'a.py': ast.parse('from .b import y'),
            'b.py': ast.parse('def f():\n    from timmdata import z\n'), 'c.py': ast.parse('from . import a')}
    assert import_graph(srcs) == {'__init__': {'a'}, 'a': {'b'}, 'b': {'__init__'}, 'c': {'a'}}
    assert circles(import_graph(srcs)) == ['__init__ -> a -> b -> __init__']
    # an import by name is an import: a circle through importlib is one too
    hidden = {'d.py': ast.parse('import importlib\ndef f():\n    return importlib.import_module("timmdata.e").x\n'),
              'e.py': ast.parse('from .d import f'), 'g.py': ast.parse('def h(m):\n    return __import__("timmdata.d")\n')}
    assert import_graph(hidden) == {'d': {'e'}, 'e': {'d'}, 'g': {'d'}}
    assert circles(import_graph(hidden)) == ['d -> e -> d']
    cell = lambda src: {'cell_type': 'code', 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': src}
    for name, src in (('01_a.ipynb', '#| default_exp a\nfrom .b import x'), ('02_b.ipynb', '#| default_exp b'),
                      ('03_c.ipynb', '#| default_exp c\nfrom timmdata.a import x\nimport timmdata.b')):
        (tmp_path / name).write_text(json.dumps({'cells': [cell(src)]}))
    assert notebooks_out_of_order(tmp_path) == ['nbs/01_a.ipynb (cell 0) imports b from nbs/02_b.ipynb: a notebook imports '
                                                'only lower-numbered ones (renumber one of them)']


# --- issue 42: pages that explain with pictures, open with them (not with tests), and cells a reader can take in

# The pages of the data's way (STYLE.md: files -> reader -> decode -> per-sample ops -> collate -> pinned batch ->
# PrefetchLoader -> model, and the order and worker machinery between them). The rule: each shows what its stage does
# as a picture drawn when the page was built (a saved image output; a png linked from markdown is not one), so a
# page of the data's way added here must come with its picture.
DATA_WAY = ('readers/05_readers', 'pixels/06_decode', 'pixels/09_resample', '10_transforms', 'store/19_format', '25c_dataset',
            'sources/21d_shard_io', 'streams/24_global_order', 'streams/25_streaming', 'batch/27_collate',
            'batch/28_batch_ring', '29_mixup', 'engine/30_feeder', 'engine/31_prefetch', 'engine/33_batch_plan',
            'engine/36_gpu_decode', 'engine/37_threads', '38_loader')  # fmt: skip
# Pages off the data's way that explain with a picture too: each opens with one from a real run (or a saved benchmark's)
PICTURED = ('readers/04b_splits', 'pixels/06c_nvimgcodec', 'parquet/26bb_parquet_files', 'parquet/26cd_parquet_index',
            'watch/37aa_metrics_server', 'engine/37c_decode_choice')  # fmt: skip
TEST_WALL = 3  # a first code block with more `test_*(...)` lines than this is a test wall: hide it (`#| hide`)
# Pages that open with a test wall today, in notebooks whose cells other branches were editing when this check came
# (issue 42): hide the block (`#| hide` as its first line) and take the page off this list. The check fails when a
# listed page no longer opens with a wall, so the list only shrinks.
OPENS_WITH_TESTS = set()
MAX_EXPORT_LINES = 150  # STYLE.md: one class or function per export cell, at most about 150 lines
HIDDEN = re.compile(r'#\|\s*(hide|export|exporti|default_exp|echo:\s*false)\b')  # cells whose code a page does not show


def _rel(path: Path) -> str:
    "A notebook as the messages name it: nbs/engine/30_feeder.ipynb (any other folder: nbs/ and the file name)."
    return f'nbs/{path.relative_to(NBS).as_posix()}' if path.is_relative_to(NBS) else f'nbs/{path.name}'


def cells(path: Path) -> list:
    return json.loads(path.read_text(encoding='utf-8'))['cells']


def cell_source(c: dict) -> str:
    return c['source'] if isinstance(c['source'], str) else ''.join(c['source'])


def has_picture(c: dict) -> bool:
    "A saved image output (png; a photo-like one re-encoded as jpeg by tools/shrink_nb_images.py counts too)."
    return any(k in ('image/png', 'image/jpeg') for o in c.get('outputs', []) for k in o.get('data', {}))


def first_code_block(cs: list) -> tuple:
    """(index, source) of the first code cell a page shows below its pictures: not hidden (`#| hide`, `#| export`,
    `#| default_exp`, `#| echo: false`), not imports only, not a picture; (None, '') when there is none."""
    for i, c in enumerate(cs):
        if c['cell_type'] != 'code': continue
        lines = [ln for ln in cell_source(c).split('\n') if ln.strip()]
        if not lines or HIDDEN.match(lines[0]) or has_picture(c): continue
        code = [ln for ln in lines if not ln.lstrip().startswith('#')]
        if code and all(re.match(r'(import|from)\s', ln) for ln in code): continue
        return i, cell_source(c)
    return None, ''


def opens_with_tests(path: Path) -> str | None:
    i, src = first_code_block(cells(path))
    n = len(re.findall(r'^\s*test_\w+\(', src, re.MULTILINE))
    return f'{_rel(path)} (cell {i}): the first code block shown is {n} test lines; hide it (#| hide)' if n > TEST_WALL else None


def signature_lines(src: str) -> int:
    "Lines of `src` that are functions' signatures past their first line (a parameter per line with its docment: the reference's table, not code to hold); 0 where the cell does not parse."
    try:
        tree = ast.parse('\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!'))))
    except SyntaxError:
        return 0
    return sum(max(0, f.body[0].lineno - f.lineno - 1) for f in ast.walk(tree)
               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.body)


def long_export_cells(path: Path, bound: int = MAX_EXPORT_LINES) -> list:
    "Export cells longer than `bound` lines, a signature's parameter lines not counted."
    return [f'{_rel(path)} (cell {i}): an export cell of {n} lines past its signatures (at most {bound}: split it, a sentence for each piece)'
            for i, c in enumerate(cells(path)) if c['cell_type'] == 'code' and re.match(r'#\|\s*exporti?\b', cell_source(c))
            and (n := len(cell_source(c).splitlines()) - signature_lines(cell_source(c))) > bound]


def test_every_page_of_the_data_way_has_a_picture():
    missing = [f'nbs/{n}.ipynb has no picture output (draw what the stage does from a real run, and save the output: '
               f'python tools/exec_nb.py)' for n in DATA_WAY + PICTURED if not any(has_picture(c) for c in cells(NBS / f'{n}.ipynb'))]
    assert not missing, '\n'.join(missing)


def test_no_page_opens_with_a_wall_of_tests():
    found = {p.stem: opens_with_tests(p) for p in sorted(NBS.rglob('*.ipynb'))}
    bad = [m for n, m in found.items() if m and n not in OPENS_WITH_TESTS]
    fixed = [f'nbs/{n}.ipynb no longer opens with tests: take it off OPENS_WITH_TESTS' for n in sorted(OPENS_WITH_TESTS) if not found.get(n)]
    assert not bad + fixed, '\n'.join(bad + fixed)


def test_export_cells_are_short():
    bad = [m for p in sorted(NBS.rglob('*.ipynb')) for m in long_export_cells(p)]
    assert not bad, '\n'.join(bad)


def test_the_page_checks_can_fail(tmp_path):
    "The checks above find a page without a picture, a test wall shown first, a long export cell (a pass means something)."
    cell = lambda src, outs=(): {'cell_type': 'code', 'metadata': {}, 'outputs': list(outs), 'execution_count': None, 'source': src}
    pic = {'output_type': 'display_data', 'metadata': {}, 'data': {'image/png': 'iVBOR', 'text/plain': ['<Figure>']}}
    walls = '\n'.join(f'test_eq({k}, {k})' for k in range(TEST_WALL + 1))
    nb = {'cells': [cell('#| default_exp x'), cell('#| export\nimport os'), cell('import numpy as np'),
                    cell('#| hide\n' + walls), cell('x = 1', [pic]), cell(walls), cell('#| export\n' + 'y = 1\n' * 150)]}  # fmt: skip
    (tmp_path / '01_x.ipynb').write_text(json.dumps(nb))
    assert first_code_block(nb['cells'])[0] == 5 and not has_picture(nb['cells'][5]) and has_picture(nb['cells'][4])
    assert opens_with_tests(tmp_path / '01_x.ipynb').startswith('nbs/01_x.ipynb (cell 5): the first code block shown is 4 test lines')
    assert long_export_cells(tmp_path / '01_x.ipynb') == [('nbs/01_x.ipynb (cell 6): an export cell of 151 lines past its '
                                                           'signatures (at most 150: split it, a sentence for each piece)')]
    sig = '#| export\ndef f(\n' + '    a,  # a documented parameter\n' * 200 + '):\n' + '    y = 1\n' * 140
    assert signature_lines(sig) == 201 and len(sig.splitlines()) - signature_lines(sig) == 142  # its signature not counted
    nb['cells'][5] = cell('#| hide\n' + walls)
    (tmp_path / '01_x.ipynb').write_text(json.dumps(nb))
    assert opens_with_tests(tmp_path / '01_x.ipynb') is None and first_code_block(nb['cells']) == (None, '')



DRAWS = re.compile(r'\bplt\.(subplots|figure|imshow|plot|bar|barh|hist|scatter)\(|\.(imshow|plot|barh?|hist|scatter)\(')
NOT_RUN = re.compile(r'#\|\s*(hide|export|exporti|cuda|eval:\s*false|output:\s*false)\b')  # not shown, or not run for the page


def unsaved_pictures(path: Path) -> list:
    "Cells a page shows that draw at their top level (not only inside a def) with no saved picture: the site shows none (the build does not run notebooks)."
    out = []
    for i, c in enumerate(cells(path)):
        src = cell_source(c)
        if c['cell_type'] != 'code' or has_picture(c) or any(NOT_RUN.match(ln) for ln in src.split('\n') if ln.startswith('#|')):
            continue
        code = '\n'.join(ln for ln in src.split('\n') if not ln.lstrip().startswith(('%', '!')))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        top = [ast.get_source_segment(code, n) or '' for n in tree.body
               if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if any(DRAWS.search(t) for t in top) and not any('plt.close' in t for t in top):
            out.append(f'{_rel(path)} (cell {i}): draws a picture but has none saved (the site shows none): '
                       f'python tools/exec_nb.py {_rel(path)}')
    return out


def test_every_picture_drawn_is_saved():
    bad = [m for p in sorted(NBS.rglob('*.ipynb')) for m in unsaved_pictures(p)]
    assert not bad, '\n'.join(bad)


def test_the_unsaved_picture_check_can_fail(tmp_path):
    cell = lambda src, outs=(): {'cell_type': 'code', 'metadata': {}, 'outputs': list(outs), 'execution_count': None, 'source': src}
    pic = {'output_type': 'display_data', 'metadata': {}, 'data': {'image/jpeg': '/9j/', 'text/plain': ['<Figure>']}}
    nb = {'cells': [cell('fig, ax = plt.subplots()\nax.imshow(x)'), cell('ax.plot(y)', [pic]),
                    cell('def show():\n    plt.imshow(x)'), cell('#| hide\nplt.plot(z)'), cell('#| cuda\nax.imshow(x)'),
                    cell('fig = plt.figure()\nplt.close(fig)'), cell('#| code-fold: true\nshow()\nplt.hist(v)')]}  # fmt: skip
    (tmp_path / '01_x.ipynb').write_text(json.dumps(nb))
    assert [m.split(':')[0] for m in unsaved_pictures(tmp_path / '01_x.ipynb')] == ['nbs/01_x.ipynb (cell 0)', 'nbs/01_x.ipynb (cell 6)']

# --- issue 57: a module's `__getattr__` / `__dir__` (PEP 562) is machinery, not an API entry. nbdev documents every
# function of an `#| export` cell (the page showed a bold "getattr"), so they go in an `#| exporti` cell, as the home page's do
MODULE_HOOK = re.compile(r'^def (__getattr__|__dir__)\b', re.MULTILINE)
EXPORT = re.compile(r'^#\|\s*export\b', re.MULTILINE)  # `#| export`, not `#| exporti`


def documented_module_hooks(path: Path) -> list:
    out = []
    for i, c in enumerate(cells(path)):
        src = cell_source(c)
        if c['cell_type'] != 'code': continue
        hooks = sorted(set(MODULE_HOOK.findall(src))) if EXPORT.search(src) else []
        hooks += [m for m in re.findall(r'show_doc\(\s*(__getattr__|__dir__)\b', src) if m not in hooks]
        out += [f'{_rel(path)} (cell {i}): the module {h} is documented as an API entry; define it in an `#| exporti` cell '
                f'(and show_doc it nowhere)' for h in hooks]
    return out


def test_no_page_documents_a_module_getattr():
    bad = [m for p in sorted(NBS.rglob('*.ipynb')) for m in documented_module_hooks(p)]
    assert not bad, '\n'.join(bad)


def test_the_module_hook_check_can_fail(tmp_path):
    cell = lambda src: {'cell_type': 'code', 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': src}
    hook = 'def __getattr__(name):\n    raise AttributeError(name)\n'
    nb = {'cells': [cell('#| export\nx = 1\n\n\n' + hook), cell('#| exporti\n' + hook), cell('#| export\ndef __dir__():\n    return []'),
                    cell('#| export\nclass A:\n    def __getattr__(self, name):\n        return 1'), cell('show_doc(__getattr__)')]}  # fmt: skip
    (tmp_path / '01_x.ipynb').write_text(json.dumps(nb))
    assert [m.split(':')[0] for m in documented_module_hooks(tmp_path / '01_x.ipynb')] == [
        'nbs/01_x.ipynb (cell 0)', 'nbs/01_x.ipynb (cell 2)', 'nbs/01_x.ipynb (cell 4)']


# One how-to layout: each how-to works in a fresh folder of its own, made and entered in a hidden cell
# (`tmp = Path(tempfile.mkdtemp()); os.chdir(tmp)`), its data under `data/` there, so the code a reader copies names
# relative paths (`data/train`) and writes nothing into the folder the notebook sits in.
HOWTO_FOLDER = re.compile(r'^#\|\s*hide\b[\s\S]*tempfile\.mkdtemp\(\)[\s\S]*os\.chdir\(', re.MULTILINE)


def howto_layout_problems(path: Path) -> list:
    cs = [c for c in cells(path) if c['cell_type'] == 'code']
    shown = [i for i, c in enumerate(cs) if 'mkdtemp(' in cell_source(c) and not HIDDEN.match(cell_source(c))]
    out = [f'{_rel(path)} (code cell {i}): a temporary folder made in the code shown; make it and enter it in a hidden '
           f'cell (os.chdir), and name the data relative to it (data/...)' for i in shown]
    if not any(HOWTO_FOLDER.search(cell_source(c)) for c in cs):
        out.append(f'{_rel(path)}: no hidden cell makes and enters a fresh folder (tempfile.mkdtemp(), os.chdir)')
    return out


def test_howtos_share_one_layout():
    bad = [m for p in sorted((NBS / 'howto').glob('*.ipynb')) for m in howto_layout_problems(p)]
    assert not bad, '\n'.join(bad)


def test_the_howto_layout_check_can_fail(tmp_path):
    cell = lambda src: {'cell_type': 'code', 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': src}
    good = cell('#| hide\nimport os, tempfile\n\ntmp = Path(tempfile.mkdtemp())\nos.chdir(tmp)')
    for cs, n in (([good, cell("data = make_sample_dataset(Path('data'))")], 0),
                  ([cell("root = make_sample_dataset(Path(tempfile.mkdtemp()) / 'pets')")], 2),
                  ([good, cell('work = Path(tempfile.mkdtemp())')], 1)):  # fmt: skip
        (tmp_path / '01_x.ipynb').write_text(json.dumps({'cells': cs}))
        assert len(howto_layout_problems(tmp_path / '01_x.ipynb')) == n, howto_layout_problems(tmp_path / '01_x.ipynb')
