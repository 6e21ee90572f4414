"""Counts timmdata's loader-type classes (issue 41): the classes a loader is made of, read from the library itself.

A loader-type class is (a) a subclass of torch's `DataLoader` or of the feeder's `FedLoader`, (b) a timmdata class in
the method order of one of those (a mixin such as `IteratorParts`, `BatchOps` is a step and is listed apart), or
(c) a wrapper a loader puts around its iterator, its dataset or its collate (the classes named below where the tree
has them). Run from a checkout's root: `PYTHONPATH=$PWD python tools/count_loader_classes.py`."""
import importlib, inspect, pkgutil, sys
import torch.utils.data as tud
import timmdata

WRAPPERS = ('DeliveredIterator', '_TimedDelivered', 'SeededDataset', '_TimedSeeded', '_TimedCollate', 'TimmLoaderView',
            'StatefulLoader')  # (c): around the iterator, the dataset, the collate; and the resume mixins of old trees
STEPS = ('BatchOps', 'NaFlexBatchOps')  # the per-batch steps a prefetcher runs (not loaders)

classes = {}
for m in pkgutil.iter_modules(timmdata.__path__):
    if m.name.startswith('_'): continue
    try: mod = importlib.import_module(f'timmdata.{m.name}')
    except Exception: continue
    for n, c in vars(mod).items():
        if inspect.isclass(c) and c.__module__ == mod.__name__: classes[f'{mod.__name__}.{n}'] = c
feeder = importlib.import_module('timmdata.engine.feeder')
roots = [tud.DataLoader] + ([feeder.FedLoader] if hasattr(feeder, 'FedLoader') else [])
loaders = {k: c for k, c in classes.items() if any(issubclass(c, r) for r in roots)}
mixins = {f'{b.__module__}.{b.__name__}': b for c in loaders.values() for b in c.__mro__
          if b.__module__.startswith('timmdata.') and b.__name__ not in STEPS}
found = {**mixins, **loaders, **{k: c for k, c in classes.items() if c.__name__ in WRAPPERS}}
main = {k: c for k, c in found.items() if 'naflex' not in k and 'gpu_decode' not in k}
for k in sorted(found): print(('  ' if k in main else '  (naflex/device) ') + k)
print(f'{len(found)} loader-type classes; {len(main)} on the main path (without the NaFlex and device-decode loaders)')
