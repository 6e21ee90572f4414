"""Counts timmdata's loader-type classes (issue 41): the classes a loader is made of, read from the library itself.

A loader-type class is (a) a subclass of torch's `DataLoader`, of the feeder's `FedLoader` (trees that have it) or of
`PrefetchLoader`, or any class that builds a `DeviceFeeder` (a loader on the device loop), (b) a timmdata class in
the method order of one of those (a mixin such as `IteratorParts`, `BatchOps` is a step and is listed apart), or
(c) a wrapper a loader puts around its iterator, its dataset or its collate (the classes named below where the tree
has them). Run from a checkout's root: `PYTHONPATH=$PWD python tools/count_loader_classes.py`."""
import importlib, inspect, pkgutil, sys
import torch.utils.data as tud
import timmdata

WRAPPERS = ('DeliveredIterator', '_TimedDelivered', 'SeededDataset', '_TimedSeeded', '_TimedCollate', 'TimmLoaderView',
            'StatefulLoader')  # (c): around the iterator, the dataset, the collate; and the resume mixins of old trees
STEPS = ('BatchOps', 'NaFlexBatchOps', 'DeviceDecodeStep')  # the per-batch steps a prefetcher runs (not loaders)

classes = {}
for m in pkgutil.walk_packages(timmdata.__path__, 'timmdata.'):  # the packages' modules too
    if m.name.rsplit('.', 1)[-1].startswith('_'): continue
    try: mod = importlib.import_module(m.name)
    except Exception: continue
    for n, c in vars(mod).items():
        if inspect.isclass(c) and c.__module__ == mod.__name__: classes[f'{mod.__name__}.{n}'] = c
def _module(*names):
    "The first of `names` that imports: the module's path in this tree (packages since issue 42, flat before)."
    for n in names:
        try: return importlib.import_module(n)
        except ImportError: pass
    raise ImportError(names)


feeder = _module('timmdata.engine.feeder', 'timmdata.feeder')
prefetch = _module('timmdata.engine.prefetch', 'timmdata.prefetch')
roots = [tud.DataLoader, prefetch.PrefetchLoader] + ([feeder.FedLoader] if hasattr(feeder, 'FedLoader') else [])

def builds_feeder(c) -> bool:
    "Does the class's own source make a `DeviceFeeder` (a loader on the device loop, whatever its base)?"
    try: return c is not feeder.DeviceFeeder and 'DeviceFeeder(' in inspect.getsource(c)
    except (OSError, TypeError): return False

loaders = {k: c for k, c in classes.items() if any(issubclass(c, r) for r in roots) or builds_feeder(c)}
mixins = {f'{b.__module__}.{b.__name__}': b for c in loaders.values() for b in c.__mro__
          if b.__module__.startswith('timmdata.') and b.__name__ not in STEPS}
found = {**mixins, **loaders, **{k: c for k, c in classes.items() if c.__name__ in WRAPPERS}}
main = {k: c for k, c in found.items() if 'naflex' not in k and 'gpu_decode' not in k}
for k in sorted(found): print(('  ' if k in main else '  (naflex/device) ') + k)
print(f'{len(found)} loader-type classes; {len(main)} on the main path (without the NaFlex and device-decode loaders)')
