"""Follows `create_loader`'s `dataset` argument through the library: the calls that pass it on, in call order.

    PYTHONPATH=$PWD python tools/follow_arg.py                 # every case, each stop listed, then the figures
    PYTHONPATH=$PWD python tools/follow_arg.py --case train    # one case (timm's train.py loader)
    PYTHONPATH=$PWD python tools/follow_arg.py --quiet --json  # the figures only, as JSON (tests/test_layout.py)

What runs. `timmdata.create_loader(dataset, ...)` over a tiny folder of images (`make_sample_dataset`: two classes,
two images each), then one batch drawn (the batch plan reads its sampler's order there), for each CASE: the loaders
timm's train.py makes (`input_size=(3, 224, 224)`, `is_training=True` with the prefetcher, and its eval loader), the
same distributed (a one-rank gloo group in this process: timm's `DistributedSampler`, `OrderedDistributedSampler`,
`RepeatAugSampler` with `num_aug_repeats=3`), `order='global'` (the `PositionSampler`) and scheduled sizes
(`input_size_choices`): each branch of the sampler chain once. `num_workers=0`, `device='cpu'`.

What is counted. Under `sys.setprofile`, a STOP is a call of a Python function defined in timmdata (a module under
`timmdata/`) that is passed the dataset: one of its arguments other than `self` is

- the dataset object itself (`is`), or
- a holder of it: an object whose instance attribute `dataset`, `_dataset` or `data_source` (torch's samplers' name),
  read from its `__dict__` (never through a property), is the dataset or a holder already seen: `SeededDataset`,
  `ScheduledTransformDataset`, a sampler over the dataset, a DataLoader holding one.

A method called on the dataset or a holder (`self` is it) is the object doing its own work, not the dataset passed on,
and is not a stop (so a sample's decode is not counted); its constructor is, when the dataset is its argument. A stop's
MODULE is the dotted module of the function called; its CALLER the nearest frame of a timmdata module below it on
the stack (calls made from torch, e.g. DataLoader.__init__, are the caller's that called torch).

A STEP BACK UP is a stop whose caller stands LOWER than the callee's module in the layering of
`tests/test_layout.py`: its floor (`FLOORS`: readers 1 ... wiring 7, tools 8) and, on one floor, a top module
(timm's map: `timmdata/loader.py`, `distributed_sampler.py`, `scheduled_sampler.py`) above a package's machinery
(`timmdata/engine/...`): "the API modules at the top use the machinery, never the other way" (STYLE.md). So
`engine.batch_plan -> distributed_sampler` (both floor 7) is a step back up, `scheduled_sampler -> engine.batch_plan`
a step down; a call inside one module is neither. A BACK-AND-FORTH is a stop whose module is the one two stops
before (A, B, A), counted per pair of modules.

The figures (`--case all`, the default) are over the UNION of the cases: each distinct stop (caller module, function
called) once, in the order first met, the way a reader following the argument through the code meets each call once.
"""

from __future__ import annotations
import argparse, json, os, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / 'timmdata'
HOLDS = ('dataset', '_dataset', 'data_source')  # the attributes by which an object holds the dataset
BASE = dict(input_size=(3, 224, 224), batch_size=4, use_prefetcher=True, num_workers=0, device='cpu')
CASES = {  # timm's train.py: create_loader(dataset, input_size=..., batch_size=..., is_training=..., distributed=...)
    'train': dict(BASE, is_training=True, distributed=False),
    'eval': dict(BASE, is_training=False, distributed=False),
    'train_distributed': dict(BASE, is_training=True, distributed=True),  # DistributedSampler
    'eval_distributed': dict(BASE, is_training=False, distributed=True),  # OrderedDistributedSampler
    'train_aug_repeats': dict(BASE, is_training=True, distributed=True, num_aug_repeats=3),  # RepeatAugSampler
    'train_global_order': dict(BASE, is_training=True, distributed=False, order='global', seed=0),  # PositionSampler
    'train_scheduled': dict(BASE, is_training=True, distributed=False, input_size_choices=[160, 224], batch_size_choices=[4, 2]),
}


def floors() -> dict:
    "tests/test_layout.py's FLOORS (read from its source: the one statement of the library's layering)."
    import ast
    tree = ast.parse((ROOT / 'tests' / 'test_layout.py').read_text(encoding='utf-8'))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', '') == 'FLOORS')
    return ast.literal_eval(node.value)


def module_of(filename: str):
    "The dotted module ('engine.batch_plan') of a source file under timmdata/, else None."
    try: rel = Path(filename).resolve().relative_to(LIB).as_posix()
    except ValueError: return None
    if not rel.endswith('.py'): return None
    parts = rel[:-3].split('/')
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def height(mod: str, fl: dict) -> tuple:
    "Where a module stands: (its floor, 1 for a top module of timm's map, 0 for a package's machinery)."
    return (fl.get(mod, 0), 0 if '.' in mod else 1)


def follow(dataset, call) -> list:
    "Run `call()` under a profiler; the stops as (caller module, callee module, function name), in call order."
    carried = {id(dataset)}  # the dataset and its wrappers (by id; each is kept alive by `keep`)
    keep, stops = [dataset], []

    def carries(v) -> bool:
        if id(v) in carried: return True
        d = getattr(v, '__dict__', None) if not isinstance(v, type) else None
        if not isinstance(d, dict): return False
        if any(id(d.get(k)) in carried for k in HOLDS if d.get(k) is not None):
            carried.add(id(v)); keep.append(v)
            return True
        return False

    def hook(frame, event, arg):
        if event != 'call': return
        code = frame.f_code
        mod = module_of(code.co_filename)
        if mod is None: return
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        loc = frame.f_locals
        names = code.co_varnames[:n]
        if names and names[0] == 'self': names = names[1:]  # the object's own work, not the dataset passed on
        vals = [loc.get(name) for name in names]
        if code.co_flags & 0x04: vals += list(loc.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
        if not any(carries(v) for v in vals if v is not None): return
        up = frame.f_back
        while up is not None and module_of(up.f_code.co_filename) is None: up = up.f_back
        stops.append((module_of(up.f_code.co_filename) if up else None, mod, code.co_qualname))

    sys.setprofile(hook)
    try: call()
    finally: sys.setprofile(None)
    return stops


def figures(stops: list, fl: dict) -> dict:
    "The counts: stops, distinct modules, steps back up, and the back-and-forths between two modules."
    back_up = [s for s in stops if s[0] and s[0] != s[1] and height(s[1], fl) > height(s[0], fl)]
    mods = [s[1] for s in stops]
    swaps = {}
    for a, b, c in zip(mods, mods[1:], mods[2:]):
        if a == c and a != b:
            k = ' <-> '.join(sorted((a, b)))
            swaps[k] = swaps.get(k, 0) + 1
    return dict(stops=len(stops), modules=len(set(mods)), back_up=len(back_up), back_and_forth=swaps,
                back_up_calls=[f'{s[0]} -> {s[1]}.{s[2]}' for s in back_up])


def run_case(name: str, root: Path) -> list:
    "The stops of case `name`: its loader built over the sample folder (train or validation split), one batch drawn."
    import timmdata
    ds = timmdata.create_dataset('', root=str(root), split='train' if CASES[name]['is_training'] else 'validation')

    def call():
        next(iter(timmdata.create_loader(ds, **CASES[name])))  # the first batch: the plan reads its sampler's order

    return follow(ds, call)


def union(runs: list) -> list:
    "Each distinct stop (caller module, module, function) of `runs` once, in the order first met."
    return list(dict.fromkeys(s for stops in runs for s in stops))


def measure(cases=tuple(CASES)) -> tuple:
    "({case: its stops}, the figures of their union), in a one-rank process group of this process (the distributed cases)."
    import torch.distributed as dist
    from timmdata.tools.sample_data import make_sample_dataset
    with tempfile.TemporaryDirectory() as tmp:
        own = not dist.is_initialized()
        if own: dist.init_process_group('gloo', init_method=f'file://{tmp}/group', rank=0, world_size=1)
        try:
            root = make_sample_dataset(Path(tmp) / 'data', n_train=2, n_val=1, classes=['a', 'b'], size=(64, 48), num_workers=0)
            runs = {name: run_case(name, root) for name in cases}
        finally:
            if own: dist.destroy_process_group()
    return runs, figures(union(runs.values()), floors())


def show(stops: list, f: dict):
    "Print each stop (^: a step back up) and the figures."
    up = set(f['back_up_calls'])
    for i, (caller, mod, fn) in enumerate(stops, 1):
        print(f"{i:3d}{'  ^' if f'{caller} -> {mod}.{fn}' in up else '   '} {mod}.{fn}   (from {caller})")
    swaps = ', '.join(f'{k} x{v}' for k, v in f['back_and_forth'].items())
    print(f"{f['stops']} stops in {f['modules']} modules, {f['back_up']} steps back up; back and forth: {swaps or 'none'}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--case', default='all', choices=[*CASES, 'all'], help='one create_loader call, or the union of all')
    p.add_argument('--quiet', action='store_true', help='the figures only, not each stop')
    p.add_argument('--json', action='store_true', help='print the figures as JSON')
    a = p.parse_args(argv)
    runs, f = measure(tuple(CASES) if a.case == 'all' else (a.case,))
    if a.json:
        print(json.dumps(f))
        return f
    for name, stops in runs.items():
        print(f'== {name}: create_loader(dataset, {", ".join(f"{k}={v!r}" for k, v in CASES[name].items())})')
        if a.case != 'all' and not a.quiet: show(stops, f)
        else: print('   ', figures(stops, floors())['stops'], 'stops')
    if a.case == 'all':
        print('== the union of the cases: each stop once, in the order first met')
        if not a.quiet: show(union(runs.values()), f)
        else: print(f"{f['stops']} stops in {f['modules']} modules, {f['back_up']} steps back up")
    return f


if __name__ == '__main__':
    main()
