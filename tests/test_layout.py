"""The library's layout (issue 12): one module per stage of the data's way, each from its own notebook, imports
only downwards (no circle, no import up a floor), no private name imported from another module, no module over
400 statements. Reads the generated sources and the notebooks; imports nothing of timmdata."""
import ast, functools, json, os, re, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB, NBS = ROOT / 'timmdata', ROOT / 'nbs'
sys.path.insert(0, str(ROOT / 'tools'))
from imports import PACKAGE, imports, modules as all_modules  # noqa: E402  (tools/imports.py: the one parser of the library's imports)

# The floors of the data's way: a module may import modules of its own floor or lower ones, never higher.
FLOORS = {
    'tools.sample_data': 0, 'tools.photos': 0, 'config': 0, 'core.settings': 0,  # settings: every environment variable, read in one place
    'readers': 1, 'readers.core': 1, 'readers.targets': 1, 'readers.class_map': 1, 'readers.reader': 1,
    'readers.img_extensions': 1, 'readers.reader_image_folder': 1, 'readers.reader_image_in_tar': 1, 'readers.reader_image_tar': 1,
    'readers.reader_factory': 1, 'readers.reader_wds': 1, 'readers.reader_hfds': 1, 'readers.reader_hfids': 1,  # timm's reader paths
    'readers.splits': 1, 'readers.shared_count': 1,  # split names and synonyms, the splits a root holds, and the error for one it lacks
    'parquet.parquet_files': 1,  # which Parquet files make a split, sample files to try it on (beneath parquet_format)
    'net.http': 1, 'net.object_clients': 1, 'net.object_store': 1, 'net.local_s3': 1, 'store.remote_source': 1, 'net.kept_http': 1, 'sources.whole_files': 1,  # network reads bounded in bytes and time (shard_cache, shard_io and shard_index read through it)
    'store.format': 1, 'sources.shard_io': 1, 'sources.spans': 1, 'index.shard_index': 1, 'index.index_table': 1, 'index.dataset_index': 1, 'index.scanned_spans': 1, 'index.span_reader': 1, 'sources.registry': 1, 'sources.wds': 1, 'net.cache_folder': 1, 'net.shard_cache': 1, 'sources.hf_readers': 1, 'parquet.source': 1, 'parquet.parquet_format': 1, 'parquet.parquet_reader': 1, 'parquet.parquet_footers': 1, 'parquet.parquet_index': 1,  # where samples are (files, tars, CSVs, shards, a decode-once store)
    'pixels.decode': 2, 'pixels.nvimgcodec': 2,                                # bytes to pixels
    'transforms': 3, 'auto_augment': 3, 'transforms_factory': 3, 'pixels.resample': 3, 'pixels.batch_resize': 3, 'pixels.resize_kernel': 3, 'pixels.warp_kernel': 3, 'pixels.augment_kernel': 3, 'pixels.handover': 3, 'pixels.transform_base': 3, 'sample': 3, 'pixels.augment_ops': 3,  # per-sample uint8 ops
    'dataset': 4, 'streams.streaming': 4, 'streams.lookahead': 4, 'streams.global_order': 1, 'dataset_factory': 4,  # reader + decoder + transform (map-style and streams)
    'batch.collate': 5, 'batch.batch_ring': 5, 'mixup': 5, 'naflex_dataset': 5, 'naflex_mixup': 5,                     # samples to a uint8 batch (mixing collate too)
    'random_erasing': 3, 'naflex_transforms': 3, 'naflex_random_erasing': 3,  # per sample, or on the batch in the prefetcher
    'pixels.jitter': 6, 'pixels.batch_augment': 6, 'engine.prefetch': 6, 'engine.device_plan': 6, 'engine.gpu_decode': 7,                 # the batch on the device and its batch ops
    'distributed_sampler': 7, 'engine.batch_plan': 7, 'loader': 7, 'scheduled_sampler': 7, 'naflex_loader': 7, 'engine.resume': 7, 'engine.threads': 7, 'engine.tune': 7, 'engine.decode_choice': 7,        # wiring
    'store.builder': 8, 'tools.bench': 8, 'tools.cli': 8, 'tools.check': 8, 'tools.shards': 8, 'tools.simulate': 8, 'tools.simulate_startup': 8, 'tools.simulate_mix': 8,  # tools on top
    'tools.simulate_report': 8, 'tools.simulate_bounds': 8,  # the simulator's report (and the bytes its reports print); its options and bounds
    'tools.command_lines': 8, 'store.cache_options': 1,  # the commands' parsers, without torch (timmdata COMMAND --help at once)
    'core.untrusted': 0,  # the checks every reader of an untrusted dataset shares
    'core.torch_compat': 0, 'core.runtime': 0, 'core.permute': 0, 'core.old_paths': 0,  # torch's private API in one place; the helpers every device loop shares
    'core.single_flight': 0,  # one fetch per key across threads (a file read whole, a Parquet row group)
    'mix.mixing': 7,  # many sources as one dataset, in one order: wiring (its batch plan is the engine's)
    'mix.mix_order': 1,  # a mix's order by position: each source's quota per block, its samples a keyed bijection
    'engine.feeder': 6,  # the one device loop (stream, look-ahead, hand-over, marks, workers) under every prefetching loader
    'core.cuda_calls': 0,  # a lane's GPU calls (streams, events, copies), and their stand-in that records them on a CPU
    'core.stages': 0,  # the per-sample stage clock (read, decode, ops) that stats() sums
    'watch.loader_watch': 7,  # the loader's figures to TensorBoard, Prometheus, Lightning, the node (timmdata top); the slow rank named
    'watch.metrics_server': 0,  # /metrics over HTTP, bounded against slow clients (what PrometheusSink serves)
    'watch.top': 0,  # the node's watch folder and `timmdata top` over it: the records checked, the view (what LoaderWatch publishes)
    'constants': 0, 'dataset_info': 0, 'imagenet_info': 0, 'real_labels': 0, 'model_config': 0,  # timm.data's paths: metadata
    'target_transforms': 3, 'tf_preprocessing': 3,  # timm.data's paths: per-sample ops
    # the packages' front doors (each __init__ a paragraph on its job; it imports nothing)
    'core': 0, 'pixels': 0, 'batch': 0, 'store': 0, 'net': 0, 'sources': 0, 'index': 0, 'parquet': 0, 'streams': 0, 'mix': 0, 'engine': 0, 'watch': 0, 'tools': 0,
}
# The packages of timmdata's own machinery, and what each may import of the others: `core` stands on nothing, and
# `tools` (what a user runs) is imported by nothing but itself. The floors above order the modules inside and across them.
PACKAGES = ('core', 'pixels', 'batch', 'store', 'net', 'sources', 'index', 'parquet', 'streams', 'mix', 'engine', 'watch', 'tools')
# Size in statements, not lines: the formatter (ruff format, tools/format_nbs.sh) splits `a; b` and long calls over
# lines and would move a line count by ~45% without changing what a reader has to hold; 400 statements ~ 400 lines before.
MAX_STATEMENTS = 400


# A package holds one job: at most MAX_PACKAGE_MODULES modules (its front door, the __init__, not counted) and
# MAX_PACKAGE_LINES lines of generated source (the front door counted). `readers` also holds timm's reader modules under
# timm's own paths (timm.data.readers.X is timmdata.readers.X: tests/test_timm_map.py), which cannot move: not counted.
MAX_PACKAGE_MODULES, MAX_PACKAGE_LINES = 12, 5000
TIMM_PATHS = {f'readers.{m}' for m in ('class_map', 'img_extensions', 'reader', 'reader_factory', 'reader_hfds', 'reader_hfids',
                                       'reader_image_folder', 'reader_image_in_tar', 'reader_image_tar', 'reader_wds',
                                       'shared_count', 'targets')}


@functools.lru_cache(maxsize=1)
def _lib_modules() -> tuple:
    "all_modules(LIB) as pairs, walked once per run (every import read asked for it: a walk of the library each time)."
    return tuple(all_modules(LIB).items())


def modules() -> dict:
    "dotted name: path of every module (a package by its name; the top package and private modules left out)."
    return {name: path for name, path in _lib_modules() if name}


@functools.lru_cache(maxsize=None)
def _lib_imports(path: Path) -> tuple:
    "timmdata_imports of a module of the library, read once per run."
    found = imports(path.relative_to(LIB).as_posix(), path.read_text(encoding='utf-8'), {n for n, _ in _lib_modules()})
    return tuple((m, tuple(names)) for m, names in found)


def timmdata_imports(path: Path, text: str = None) -> list:
    "(module imported, names imported) for every import of timmdata in `path` (or in `text`); the package's namespace is PACKAGE ('')."
    if text is None and path.is_relative_to(LIB):
        return [(m, list(names)) for m, names in _lib_imports(path)]
    rel = path.relative_to(LIB).as_posix() if path.is_relative_to(LIB) else path.name
    return imports(rel, path.read_text(encoding='utf-8') if text is None else text, {n for n, _ in _lib_modules()})


def test_every_module_has_a_floor_and_its_own_notebook():
    mods = modules()
    assert set(mods) == set(FLOORS), f'modules without a floor: {set(mods) - set(FLOORS)}; floors without a module: {set(FLOORS) - set(mods)}'
    owners = {}
    for nb in NBS.rglob('*.ipynb'):
        for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
            m = re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)
            if m: owners.setdefault(m.group(1), []).append(nb.name)
            if c['cell_type'] == 'code':
                assert not re.search(r'^#\|[ \t]*export[ \t]+\w', ''.join(c['source']), re.M), \
                    f'{nb.name}: `#| export MODULE` appends to another module on every export; give the module its own notebook'
    for m in mods: assert len(owners.get(m, owners.get(m + '.__init__', []))) == 1, f'timmdata/{m}.py must come from exactly one notebook; found {owners.get(m)}'


@pytest.mark.parametrize('name', sorted(FLOORS))
def test_module_is_short(name):
    n = sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(modules()[name].read_text(encoding='utf-8'))))
    assert n < MAX_STATEMENTS, f'timmdata/{modules()[name].relative_to(LIB)} has {n} statements; split it (one concern per module, under {MAX_STATEMENTS})'


def package_size(package: str) -> tuple:
    "(modules, lines) of a package: its own modules (timm's paths left out), and the lines of those and of its front door."
    own = {n: p for n, p in modules().items() if n.startswith(package + '.') and n not in TIMM_PATHS}
    return len(own), sum(len(p.read_text(encoding='utf-8').splitlines()) for p in [*own.values(), modules()[package]])


@pytest.mark.parametrize('package', PACKAGES)
def test_package_is_small(package):
    n, lines = package_size(package)
    assert n <= MAX_PACKAGE_MODULES and lines <= MAX_PACKAGE_LINES, (
        f'timmdata/{package}/ holds {n} modules and {lines:,} lines (at most {MAX_PACKAGE_MODULES} and {MAX_PACKAGE_LINES:,}): '
        f'split it by job into a package of its own, or move a module where it belongs')


def test_imports_go_down_and_never_private():
    for name, path in modules().items():
        for dep, names in timmdata_imports(path):
            if dep == PACKAGE: continue  # the package's namespace: test_no_import_circle_through_the_package
            assert dep in FLOORS, f'{name} imports unknown module {dep}'
            assert FLOORS[dep] <= FLOORS[name], f'{name} (floor {FLOORS[name]}) imports {dep} (floor {FLOORS[dep]}): an import up a floor'
            private = [n for n in names if n.startswith('_')]
            assert not private, f'{name} imports private names {private} from {dep}: make them public in {dep}, or move them'


def test_packages_core_at_the_bottom_tools_at_the_top():
    for name, path in modules().items():
        deps = {d for d, _ in timmdata_imports(path)}
        if name.split('.')[0] == 'core':
            assert all(d.split('.')[0] == 'core' for d in deps), f'{name} (core) imports {sorted(deps)}: core stands on nothing else'
        if name.split('.')[0] != 'tools':
            assert not any(d.split('.')[0] == 'tools' and d != 'tools.sample_data' for d in deps), \
                f'{name} imports {sorted(d for d in deps if d.startswith("tools"))}: tools stand on top, nothing imports them'
    assert set(PACKAGES) <= set(modules()), f'packages without a front door (__init__): {set(PACKAGES) - set(modules())}'


def test_no_import_circle():
    graph = {name: {d for d, _ in timmdata_imports(path)} - {PACKAGE} for name, path in modules().items()}
    state = {}
    def visit(n, stack):
        state[n] = 'open'
        for d in graph.get(n, ()):
            if state.get(d) == 'open': pytest.fail(f'import circle: {" -> ".join(stack + [n, d])}')
            if d not in state: visit(d, stack + [n])
        state[n] = 'done'
    for n in graph:
        if n not in state: visit(n, [])


def package_graph() -> dict:
    "The import graph of timmdata's modules and of the package itself ('timmdata': its own imports and the modules its exports load)."
    graph = {name: {d or 'timmdata' for d, _ in timmdata_imports(path)} for name, path in modules().items()}
    graph['timmdata'] = {d for d, _ in timmdata_imports(LIB / '__init__.py') if d}  # its eager imports and its exports table
    return graph


def find_circle(graph: dict):
    "One import circle as a list of names (first = last), or None."
    state = {}
    def visit(n, stack):
        state[n] = 'open'
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 'open': return stack + [n, d]
            if d not in state:
                c = visit(d, stack + [n])
                if c: return c
        state[n] = 'done'
    for n in sorted(graph):
        if n not in state:
            c = visit(n, [])
            if c: return c[c.index(c[-1]):]
    return None


def test_no_import_circle_through_the_package():
    "The package's exports count as imports: `timmdata -> check -> command_lines -> timmdata` (command_lines using `import timmdata`) is a circle."
    graph = package_graph()
    assert 'tools.check' in graph['timmdata'] and 'store.format' in graph['timmdata']  # the exports and the eager imports are seen
    c = find_circle(graph)
    assert c is None, f'import circle: {" -> ".join(c)}; import the modules you need (from timmdata.loader import ...), not the package'
    assert find_circle({**graph, 'tools.command_lines': graph['tools.command_lines'] | {'timmdata'}}) == ['timmdata', 'tools.check', 'tools.command_lines', 'timmdata']  # the check can fail


def test_the_check_can_fail(tmp_path):
    "The import parser sees relative, absolute and package imports, so the checks above have something to check."
    p = tmp_path / 'm.py'
    p.write_text('from .collate import fast_collate, _x\nimport timmdata.loader\nfrom timmdata import transforms, ImageDataset\n'
                 'import timmdata\nfrom timmdata.engine import feeder\n')
    assert timmdata_imports(p) == [('collate', ['fast_collate', '_x']), ('loader', []), ('transforms', []), (PACKAGE, ['ImageDataset']),
                                   (PACKAGE, []), ('engine.feeder', [])]


# Following `create_loader`'s dataset through the calls that pass it on (tools/follow_arg.py, which says what it counts):
# the sampler chain is built in one place (timmdata.scheduled_sampler.make_batch_plan), so the way reads downward.
MAX_STOPS, MAX_BACK_UP = 28, 8


@pytest.mark.slow  # a fresh interpreter follows the calls (~10 s here)
def test_create_loader_dataset_reads_downward():
    env = {k: v for k, v in os.environ.items() if k in ('PATH', 'HOME', 'TMPDIR', 'TIMMDATA_SAMPLE_CACHE')}
    env['PYTHONPATH'] = str(ROOT)  # run apart (this file imports nothing of timmdata), with none of the settings
    # an earlier test may have left in the environment (TIMMDATA_WATCH adds the watch's call)
    out = subprocess.run([sys.executable, str(ROOT / 'tools' / 'follow_arg.py'), '--json'], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    f = json.loads(out.stdout.strip().splitlines()[-1])
    assert f['stops'] >= 10, f  # the follower sees the calls (a pass means something)
    assert f['stops'] <= MAX_STOPS and f['back_up'] <= MAX_BACK_UP, (
        f"create_loader's dataset passes through {f['stops']} calls, {f['back_up']} of them back up a floor "
        f"(at most {MAX_STOPS} and {MAX_BACK_UP}): {f['back_up_calls']}; build the sampler chain in one place "
        f"(make_batch_plan) and see `python tools/follow_arg.py`")
    assert not f['back_and_forth'].get('distributed_sampler <-> engine.batch_plan'), f['back_and_forth']
