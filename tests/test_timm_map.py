"""timm's map whole: `from timm.data.X import Y` becomes `from timmdata.X import Y` for every public name that every
module of the installed timm.data defines, its packages' modules included (`timm.data.readers.reader_image_in_tar.TarState`
-> `timmdata.readers.reader_image_in_tar.TarState`). The walk is over what timm has, so a timm release that adds a name
fails here naming it; every missing name is listed in one failure. The module paths map as the import hook of
tools/run_timm_data_tests.py maps them (`timm.data` -> `timmdata`, `timm.data.X` -> `timmdata.X`), checked below.

A name a module defines: a class or function whose `__module__` is that module; any other value the module's own code
binds at its top level (an assignment, also inside `try`/`if`), not by an import (timm's `from typing import Dict` is
typing's, not timm's) and not a module. A package (`timm.data`, `timm.data.readers`) offers every public name of its
namespace. Private modules (`readers._hfds`) and private names are not part of the promise."""
import ast, contextlib, importlib, inspect, io, pkgutil, sys, types
from pathlib import Path

import pytest

import timm.data as td

# timm.data modules timmdata cannot offer, with the reason. Nothing else may be missing.
CANNOT_OFFER = {
    # timm's TensorFlow Datasets reader needs tensorflow and tensorflow-datasets, which timmdata does not depend on;
    # create_dataset('tfds/...') and create_reader('tfds/...') refuse by name and say what to use instead
    'timm.data.readers.reader_tfds': 'needs TensorFlow Datasets',
}


def timmdata_path(timm_path: str) -> str:
    "The timmdata module a timm.data module maps to: the import hook's rule (checked against it below)."
    return 'timmdata' + timm_path[len('timm.data'):]


def _quiet_import(name: str):
    "Import a module; timm's TensorFlow modules print to stdout before they fail."
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(name)


def timm_modules() -> list:
    "Every public module of timm.data: the package itself, its modules, its packages' modules (`readers.*`)."
    found = [m.name for m in pkgutil.walk_packages(td.__path__, 'timm.data.', onerror=lambda name: None)]
    return ['timm.data'] + sorted(n for n in found if not any(p.startswith('_') for p in n.split('.')))


def _bound_here(mod) -> tuple:
    "(names the module's top-level code assigns, names it imports), from its source."
    assigned, imported = set(), set()
    def visit(body):
        for n in body:
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    assigned.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split('.')[0] for a in n.names)
            elif isinstance(n, ast.Try):
                for part in (n.body, n.orelse, n.finalbody, *(h.body for h in n.handlers)): visit(part)
            elif isinstance(n, (ast.If, ast.With, ast.For, ast.While)):
                visit(n.body); visit(getattr(n, 'orelse', []))
    visit(ast.parse(inspect.getsource(mod)).body)
    return assigned, imported


def defined_names(mod) -> list:
    "The public names `mod` defines (see the module's docstring); a package: every public name it offers."
    pairs = [(n, v) for n, v in vars(mod).items() if not n.startswith('_') and not isinstance(v, types.ModuleType)]
    if hasattr(mod, '__path__'):
        return sorted(n for n, _ in pairs)
    assigned, imported = _bound_here(mod)
    own = {n for n, v in pairs if (getattr(v, '__module__', None) == mod.__name__ if inspect.isclass(v) or inspect.isroutine(v)
                                   else n in assigned and n not in imported)}
    return sorted(own | set(getattr(mod, '__all__', ())))


def walk() -> tuple:
    "(missing, walked, failing alike): what timmdata lacks ('timm path.name -> timmdata path'), the modules walked and their names, the modules that fail to import as timm's do."
    missing, walked, alike = [], {}, []
    for name in timm_modules():
        if name in CANNOT_OFFER: continue
        ours_name = timmdata_path(name)
        try: theirs = _quiet_import(name)
        except ImportError as e:  # timm's TensorFlow modules without TensorFlow: ours must fail with timm's error
            try: _quiet_import(ours_name)
            except ImportError as ours_e:
                if str(ours_e) == str(e): alike.append(name); continue
                missing.append(f'{ours_name}: fails with {ours_e!r}, timm with {e!r}')
            else: missing.append(f'{ours_name}: imports, where timm fails with {e!r}')
            continue
        names = walked[name] = defined_names(theirs)
        try: ours = importlib.import_module(ours_name)
        except ModuleNotFoundError:
            missing.append(f'{ours_name} (no such module): {", ".join(names)}')
            continue
        lacks = [n for n in names if not hasattr(ours, n)]
        if lacks: missing.append(f'{ours_name}: {", ".join(lacks)}')
    return missing, walked, alike


def test_every_name_of_every_module():
    missing, walked, _ = walk()
    assert not missing, (f'timm.data names missing from timmdata ({sum(len(m.split(", ")) for m in missing)} in '
                         f'{len(missing)} modules):\n' + '\n'.join(missing))


def test_the_walk_sees_timms_map():
    "The walk reaches the readers' modules and their internals (a walk that saw nothing would pass)."
    _, walked, alike = walk()
    assert len(walked) > 30 and sum(map(len, walked.values())) > 200
    assert {'TarState', 'extract_tarinfos', 'CACHE_FILENAME_SUFFIX'} <= set(walked['timm.data.readers.reader_image_in_tar'])
    assert 'SharedCount' in walked['timm.data.readers.shared_count'] and 'IterableImageDataset' in walked['timm.data.dataset']
    assert 'has_interpolation_mode' in walked['timm.data.transforms'] and 'Dict' not in walked['timm.data.auto_augment']
    assert 'create_reader' in walked['timm.data.readers'] and 'create_loader' in walked['timm.data']
    try: import tensorflow  # noqa: F401
    except ImportError: assert alike == ['timm.data.tf_preprocessing']


def test_module_paths_map_as_the_import_hook_does():
    "tools/run_timm_data_tests.py's hook (`timm.data.X` is `timmdata.X`) maps every walked module as `timmdata_path` does."
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tools'))
    try: from run_timm_data_tests import TimmDataShim
    finally: sys.path.pop(0)
    shim = TimmDataShim()
    for name in timm_modules():
        if name in CANNOT_OFFER or name == 'timm.data.tf_preprocessing': continue  # these have no timmdata module to load
        try: spec = shim.find_spec(name)
        except ModuleNotFoundError: continue  # a module timmdata lacks: test_every_name_of_every_module names it
        assert spec.loader.target == timmdata_path(name), name


def test_cannot_offer_is_real():
    "Each module listed as impossible is still timm's, and still not timmdata's (else remove it from the list)."
    for name in CANNOT_OFFER:
        assert name in timm_modules(), name
        with pytest.raises(ModuleNotFoundError): importlib.import_module(timmdata_path(name))


def test_the_name_rule_can_fail():
    "`defined_names` keeps a module's own classes, functions and constants, and drops what it imports."
    mod = types.ModuleType('fake_timm_module')
    src = ('from typing import Dict\nimport os\nfrom os.path import join\nLIMIT = 3\n'
           'try:\n    import nothing_here as nh\nexcept ImportError:\n    nh = None\n    FALLBACK = None\n'
           'def f(): pass\nclass C: pass\n_hidden = 1\n')
    exec(compile(src, 'fake_timm_module.py', 'exec'), mod.__dict__)
    import linecache
    sys.modules[mod.__name__] = mod
    try:
        linecache.cache['fake_timm_module.py'] = (len(src), None, src.splitlines(True), 'fake_timm_module.py')
        mod.__file__ = 'fake_timm_module.py'
        assert defined_names(mod) == ['C', 'FALLBACK', 'LIMIT', 'f']
    finally:
        del sys.modules[mod.__name__]
        linecache.cache.pop('fake_timm_module.py', None)


# ---------------------------------------------------------------- the internals behave as timm's

def _add(tf, name, data=b'x'):
    import tarfile
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))


def _tar_bytes(members) -> bytes:
    import tarfile
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode='w') as t:
        for m in members: _add(t, m)
    return b.getvalue()


def _tars(root: Path) -> Path:
    "A folder of tars: images at the top and in folders, other files, a tar of two inner tars, one tar without images."
    import tarfile
    root.mkdir()
    with tarfile.open(root / 'cat.tar', 'w') as t:
        for n in ('img10.jpg', 'img2.JPG', 'sub/a.png', 'notes.txt'): _add(t, n)
    with tarfile.open(root / 'dog.tar', 'w') as t:
        _add(t, 'pup.tar', _tar_bytes(['x1.jpg', 'y/x2.jpeg']))
        _add(t, 'kit.tar', _tar_bytes(['k.jpg']))
        _add(t, 'z.jpg')
    with tarfile.open(root / 'Empty.tar', 'w') as t:
        _add(t, 'readme.md')
    (root / '.hidden.tar').write_bytes(b'not a tar: glob skips it')
    return root


def _scan(result) -> tuple:
    samples, targets, class_map, tarfiles = result
    rows = [(a.name, b, c.name if c is not None else None) for a, b, c in samples]
    return (rows, targets.tolist(), class_map, samples.shape, samples.dtype, targets.dtype,
            sorted((n, sorted(s.children), s.tf, s.ti) for n, s in tarfiles))


def test_tar_scan_is_timms(tmp_path):
    from timm.data.readers.reader_image_in_tar import extract_tarinfos as theirs
    from timmdata.readers.reader_image_in_tar import extract_tarinfos as ours
    root = _tars(tmp_path / 'tars')
    for kw in ({}, dict(class_name_to_idx={'cat': 0, 'pup': 5}), dict(extensions=['.png', '.jpeg'])):
        want = _scan(theirs(str(root), **kw))
        assert _scan(ours(str(root), **kw)) == want and len(want[0]) >= 2, kw
    assert _scan(ours(root / 'cat.tar')) == _scan(theirs(str(root / 'cat.tar')))  # one tar: its folders are the classes
    a, b = ours(str(root), sort=False), theirs(str(root), sort=False)  # timm's tars in the file system's order
    assert sorted(_scan(a)[0]) == sorted(_scan(b)[0]) and len(a[0]) == 7
    cache = root / f'_tars{__import__("timmdata.readers.reader_image_in_tar", fromlist=["x"]).CACHE_FILENAME_SUFFIX}'
    theirs(str(root), cache_tarinfo=True)  # a cache timm wrote, read by ours; and the reverse
    assert cache.exists() and _scan(ours(str(root), cache_tarinfo=True)) == _scan(theirs(str(root)))
    cache.unlink()
    ours(str(root), cache_tarinfo=True)
    assert cache.exists() and _scan(theirs(str(root), cache_tarinfo=True)) == _scan(theirs(str(root)))


def test_tar_listing_is_timms():
    import tarfile
    from timm.data.readers.reader_image_tar import extract_tarinfo as theirs
    from timmdata.readers.reader_image_tar import extract_tarinfo as ours
    data = _tar_bytes(['cat/img10.jpg', 'cat/img2.JPG', 'dog/a.png', 'top.jpg', 'x/readme.txt', 'a/b/c.jpeg'])
    for kw in ({}, dict(class_to_idx={'dog': 3, 'cat': 1}), dict(sort=False)):
        got = []
        for f in (ours, theirs):
            with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                listed, cmap = f(tf, **kw)
                got.append(([(ti.name, i) for ti, i in listed], cmap))
        assert got[0] == got[1] and len(got[0][0]) >= 3, kw


def test_shared_count_is_timms():
    from timm.data.readers.shared_count import SharedCount as Theirs
    from timmdata.readers.shared_count import SharedCount as Ours
    for c in (Ours(), Theirs(), Ours(5), Theirs(5)):
        start = c.value
        c.value = start + 3
        assert c.value == start + 3 and c.shared_epoch.value == start + 3
    assert Ours(5).value == Theirs(5).value == 5


def test_wds_helpers_are_timms(caplog):
    import dataclasses, logging, random
    import timm.data.readers.reader_wds as theirs
    import timmdata.readers.reader_wds as ours
    from timmdata.readers.shared_count import SharedCount
    assert (ours.SAMPLE_SHUFFLE_SIZE, ours.SAMPLE_INITIAL_SIZE) == (theirs.SAMPLE_SHUFFLE_SIZE, theirs.SAMPLE_INITIAL_SIZE)
    field = lambda cls: [(f.name, f.default) for f in dataclasses.fields(cls)]
    assert field(ours.SplitInfo) == field(theirs.SplitInfo) and len(field(ours.SplitInfo)) == 5
    assert ours.SplitInfo(3, ('a.tar',)) == ours.SplitInfo(num_samples=3, filenames=('a.tar',), shard_lengths=(), alt_label='', name='')
    assert issubclass(ours.WdsTargetKeyError, ValueError)
    with caplog.at_level(logging.WARNING):
        assert ours.log_and_continue(OSError('damaged')) is theirs.log_and_continue(OSError('damaged')) is True
    assert sum('damaged' in r.getMessage() for r in caplog.records) == 2  # each logged the error it goes on after
    for exc in (TypeError('bug'), ours.WdsTargetKeyError('no key')):
        with pytest.raises(type(exc)): ours.log_and_continue(exc)
    with pytest.raises(TypeError): theirs.log_and_continue(TypeError('bug'))
    assert ours.pytorch_worker_seed() == theirs.pytorch_worker_seed()

    src = list(range(50))
    for seed, epoch in ((0, -1), (7, 3)):  # the same order as timm's for each (seed, epoch), run after run
        a, b = ours.detshuffle2(bufsize=10, initial=4, seed=seed, epoch=epoch), theirs.detshuffle2(bufsize=10, initial=4, seed=seed, epoch=epoch)
        for _ in range(2):
            got, want = list(a.run(iter(src))), list(b.run(iter(src)))
            assert got == want and sorted(got) == src and got != src
    shared = SharedCount(4)
    a = ours.detshuffle2(bufsize=10, initial=4, seed=1, epoch=shared)
    assert list(a.run(iter(src))) == list(a.run(iter(src)))  # a shared epoch does not move by itself

    urls = [f'shard-{i:03d}.tar' for i in range(7)]
    for args in (dict(urls=urls, nshards=20, worker_seed=lambda: 5), dict(urls='shard-{000..006}.tar', nshards=12, worker_seed=lambda: 2, epoch=3)):
        a = ours.ResampledShards2(**args)
        b = theirs.ResampledShards2(**dict(args, urls=args['urls'] if isinstance(args['urls'], str) else '::'.join(urls)))  # timm's: a string
        assert a.urls == b.urls == urls
        for _ in range(2):  # the epoch counts up each pass, the draws follow it
            got, want = list(a), list(b)
            assert got == want and len(got) == args['nshards'] and all(d['url'] in urls for d in got)
    a = ours.ResampledShards2(urls, nshards=9, worker_seed=lambda: 1, epoch=SharedCount(2))
    b = theirs.ResampledShards2('::'.join(urls), nshards=9, worker_seed=lambda: 1, epoch=theirs.SharedCount(2))
    assert list(a) == list(b) == list(a)
    with pytest.raises(TypeError, match='ResampledShards2'): ours.ResampledShards2([])


def test_flags_and_sizes():
    "timm's flags as timm's; SHUFFLE_SIZE is the buffer timmdata's hfids/ streams are shuffled with (timm's own is 4096)."
    import timm.data.transforms as tt
    import timmdata.transforms as ot
    from timmdata.readers.reader_hfids import SHUFFLE_SIZE
    from timmdata.streams.streaming import SHUFFLE_SIZE as STREAM_SHUFFLE_SIZE
    assert ot.has_interpolation_mode is tt.has_interpolation_mode is True
    assert SHUFFLE_SIZE == STREAM_SHUFFLE_SIZE == 8192
