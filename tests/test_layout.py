"""The library's layout (issue 12): one module per stage of the data's way, each from its own notebook, imports
only downwards (no circle, no import up a floor), no private name imported from another module, no module over
400 lines. Reads the generated sources and the notebooks; imports nothing of timmdata."""
import ast, json, re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB, NBS = ROOT / 'timmdata', ROOT / 'nbs'

# The floors of the data's way: a module may import modules of its own floor or lower ones, never higher.
FLOORS = {
    'sample_data': 0, 'config': 0,
    'readers': 1, 'store': 1, 'shard_io': 1, 'shard_index': 1, 'hf_readers': 1,  # where samples are (files, tars, CSVs, shards, a decode-once store)
    'decode': 2,                                  # bytes to pixels
    'transforms': 3, 'auto_augment': 3, 'transforms_factory': 3, 'resample': 3,  # per-sample uint8 ops
    'dataset': 4, 'streaming': 4, 'global_order': 1, 'dataset_factory': 4,  # reader + decoder + transform (map-style and streams)
    'collate': 5, 'mixup': 5, 'naflex_dataset': 5, 'naflex_mixup': 5,                     # samples to a uint8 batch (mixing collate too)
    'random_erasing': 3, 'naflex_transforms': 3, 'naflex_random_erasing': 3,  # per sample, or on the batch in the prefetcher
    'jitter': 6, 'prefetch': 6, 'gpu_decode': 7,                   # the batch on the device and its batch ops
    'distributed_sampler': 7, 'loader': 7, 'scheduled_sampler': 7, 'naflex_loader': 7, 'resume': 7, 'threads': 7,        # wiring
    'cache': 8, 'bench': 8, 'cli': 8, 'check': 8, 'shards': 8, # tools on top
    'untrusted': 0,  # the checks every reader of an untrusted dataset shares
    'stages': 0,  # the per-sample stage clock (read, decode, ops) that stats() sums
    'constants': 0, 'dataset_info': 0, 'imagenet_info': 0, 'real_labels': 0, 'model_config': 0,  # timm.data's paths: metadata
    'target_transforms': 3, 'tf_preprocessing': 3,  # timm.data's paths: per-sample ops
}
MAX_LINES = 400


def modules() -> dict:
    return {p.stem: p for p in sorted(LIB.glob('*.py')) if not p.stem.startswith('_')}


def timmdata_imports(path: Path) -> list:
    "(module imported, names imported) for every import of a timmdata module in `path`."
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ''
            if node.level == 1 and mod: out.append((mod.split('.')[0], [a.name for a in node.names]))
            elif node.level == 1: out += [(a.name, []) for a in node.names]  # from . import x
            elif mod.startswith('timmdata.'): out.append((mod.split('.')[1], [a.name for a in node.names]))
            elif mod == 'timmdata': out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name.split('.')[1], []) for a in node.names if a.name.startswith('timmdata.')]
    return [(m, names) for m, names in out if m not in ('_native', '__version__')]


def test_every_module_has_a_floor_and_its_own_notebook():
    mods = modules()
    assert set(mods) == set(FLOORS), f'modules without a floor: {set(mods) - set(FLOORS)}; floors without a module: {set(FLOORS) - set(mods)}'
    owners = {}
    for nb in NBS.glob('*.ipynb'):
        for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
            m = re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)
            if m: owners.setdefault(m.group(1), []).append(nb.name)
            if c['cell_type'] == 'code':
                assert not re.search(r'^#\|[ \t]*export[ \t]+\w', ''.join(c['source']), re.M), \
                    f'{nb.name}: `#| export MODULE` appends to another module on every export; give the module its own notebook'
    for m in mods: assert len(owners.get(m, [])) == 1, f'timmdata/{m}.py must come from exactly one notebook; found {owners.get(m)}'


@pytest.mark.parametrize('name', sorted(FLOORS))
def test_module_is_short(name):
    n = len((LIB / f'{name}.py').read_text(encoding='utf-8').splitlines())
    assert n < MAX_LINES, f'timmdata/{name}.py has {n} lines; split it (one concern per module, under {MAX_LINES})'


def test_imports_go_down_and_never_private():
    for name, path in modules().items():
        for dep, names in timmdata_imports(path):
            assert dep in FLOORS, f'{name} imports unknown module {dep}'
            assert FLOORS[dep] <= FLOORS[name], f'{name} (floor {FLOORS[name]}) imports {dep} (floor {FLOORS[dep]}): an import up a floor'
            private = [n for n in names if n.startswith('_')]
            assert not private, f'{name} imports private names {private} from {dep}: make them public in {dep}, or move them'


def test_no_import_circle():
    graph = {name: {d for d, _ in timmdata_imports(path)} for name, path in modules().items()}
    state = {}
    def visit(n, stack):
        state[n] = 'open'
        for d in graph.get(n, ()):
            if state.get(d) == 'open': pytest.fail(f'import circle: {" -> ".join(stack + [n, d])}')
            if d not in state: visit(d, stack + [n])
        state[n] = 'done'
    for n in graph:
        if n not in state: visit(n, [])


def test_the_check_can_fail(tmp_path):
    "The import parser sees relative, absolute and package imports, so the checks above have something to check."
    p = tmp_path / 'm.py'
    p.write_text('from .collate import fast_collate, _x\nimport timmdata.loader\nfrom timmdata import decode\n')
    assert timmdata_imports(p) == [('collate', ['fast_collate', '_x']), ('loader', []), ('decode', [])]
