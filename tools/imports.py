"""The library's imports, read from the generated sources with `ast` (nothing of timmdata is imported): the one parser
behind the layout and house tests (tests/test_layout.py, tests/test_house.py) and the packages' pictures
(tools/docs/package_picture.py), so the three see the same imports.

    from imports import modules, imports   # with tools/ on sys.path
    mods = modules()
    imports('engine/feeder.py', mods['engine.feeder'].read_text(), mods)   # [('core.runtime', [...]), ('batch.collate', [...]), ...]

A module is named by its dotted path under timmdata/ ('readers.core'; a package by its folder, 'readers'); the package's
own namespace (`import timmdata`, `from timmdata import ImageDataset`, which loads its exports) is `PACKAGE`, ''."""
from __future__ import annotations
import ast, re
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / 'timmdata'
PACKAGE = ''  # the package's own namespace: its __init__ and the exports it loads
NOT_MODULES = ('_native', '__version__')  # the C extension and the version string: imported by name, no Python module


def module_name(rel: str) -> str:
    "'readers/core.py' -> 'readers.core'; a package's 'readers/__init__.py' -> 'readers'; the top '__init__.py' -> ''."
    parts = rel[:-3].split('/')
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def modules(lib: Path = LIB) -> dict:
    "dotted name: path of every module under `lib` (a package by its name, the top package as ''; private `_x.py` left out)."
    out = {}
    for p in sorted(lib.rglob('*.py')):
        rel = p.relative_to(lib).as_posix()
        if '__pycache__' in rel or (p.stem.startswith('_') and p.stem != '__init__'): continue
        out[module_name(rel)] = p
    return out


def known(dotted: str, mods) -> str:
    "The longest prefix of `dotted` that is a module ('readers.core.x' -> 'readers.core'), else its first part."
    parts = dotted.split('.')
    return next(('.'.join(parts[:i]) for i in range(len(parts), 0, -1) if '.'.join(parts[:i]) in mods), parts[0])


def imported_by_name(node: ast.AST) -> str | None:
    "The module ('parquet.source') a call `importlib.import_module('timmdata.parquet.source')` (or `__import__`) with a constant name imports, else None."
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant): return None
    f, name = node.func, node.args[0].value
    called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ''
    if called not in ('import_module', '__import__') or not isinstance(name, str) or not name.startswith('timmdata.'): return None
    return name[len('timmdata.'):]


def _from_package(names: list, base: list, mods) -> list:
    "`from timmdata import a, b` (or `from . import a` in package `base`): a module by its name, any other name from the package's namespace."
    here, names = '.'.join(base), [n for n in names if n not in NOT_MODULES]
    out = [(known(f'{here}.{n}' if here else n, mods), []) for n in names if (f'{here}.{n}' if here else n) in mods]
    rest = [n for n in names if (f'{here}.{n}' if here else n) not in mods]
    return out + ([(here, rest)] if rest else [])


def imports(rel: str, source: str | ast.AST, mods) -> list:
    """(module imported, names imported from it) for every import of timmdata in the module at `rel` (its path under
    timmdata/, 'engine/feeder.py'), at the top or inside a function: relative imports resolved from its package,
    `from timmdata.engine import feeder` as the module engine.feeder, `importlib.import_module('timmdata.X')` with a
    constant name as an import like any other, and the top package's lazy export table (a string of
    `from timmdata.X import ...` lines in its __init__) as its imports. `mods`: the modules' dotted names (`modules()`)."""
    tree = ast.parse(source) if isinstance(source, str) else source
    pkg = rel[:-3].split('/')[:-1]  # 'readers/core.py' and 'readers/__init__.py' sit in package ['readers']
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod, names = node.module or '', [a.name for a in node.names]
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                if mod: out.append((known('.'.join(base + [mod]), mods), names))
                else: out += _from_package(names, base, mods)  # from . import x
            elif mod == 'timmdata': out += _from_package(names, [], mods)
            elif mod.startswith('timmdata.'):
                sub = mod[len('timmdata.'):]  # `from timmdata.engine import feeder` imports the module engine.feeder
                subs = [n for n in names if f'{sub}.{n}' in mods]
                out += [(f'{sub}.{n}', []) for n in subs]
                rest = [n for n in names if n not in subs]
                if rest or not subs: out.append((known(sub, mods), rest))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == 'timmdata': out.append((PACKAGE, []))
                elif a.name.startswith('timmdata.'): out.append((known(a.name[len('timmdata.'):], mods), []))
        elif (by_name := imported_by_name(node)) is not None:
            out.append((known(by_name, mods), []))
        elif rel == '__init__.py' and isinstance(node, ast.Constant) and isinstance(node.value, str):
            out += [(known(m, mods), [n.strip() for n in re.split(r'[,\s()]+', names) if n.strip()])
                    for m, names in re.findall(r'from timmdata\.([\w.]+) import (\([^)]*\)|[^\n#]*)', node.value)]
    return [(m, names) for m, names in out if m not in NOT_MODULES]
