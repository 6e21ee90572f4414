"""`make nbtest`: run every notebook's tests as `nbdev_test` does, with a line per notebook as it finishes.

nbdev_test prints nothing until the last notebook is done (minutes on a small machine); this runs nbdev's own
`test_nb` on each notebook (the same cells skipped: settings.ini's `tst_flags`), N at a time, and prints a start
line, then `[k/n] ok|FAIL name (seconds)` as each finishes, then the slowest. Exit status 1 if any failed.

    python tools/nbtest.py                 # every notebook, 2 at a time
    python tools/nbtest.py --n_workers 4 --flags slow
    python tools/nbtest.py --path nbs/47_cli.ipynb
    python tools/nbtest.py --cells 30        # and the 30 slowest cells, with their notebook and first line
"""
import argparse, gc, importlib.util, multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from nbdev.config import get_config
from nbdev.doclinks import nbglob
from nbdev.test import _keep_file, test_nb


def _time_cells(out_dir):
    """Times each code cell a notebook runs (execnb's `CaptureShell.cell`, which nbdev's `test_nb` calls per cell) and
    writes `[seconds, notebook, cell index, first line]` rows to a file per process in `out_dir`."""
    import json, time
    from execnb.shell import CaptureShell
    real = CaptureShell.cell
    def timed(self, cell, *a, **k):
        t = time.perf_counter()
        try: return real(self, cell, *a, **k)
        finally:
            if cell.cell_type == 'code':
                src = [l for l in cell.source.splitlines() if l.strip() and not l.startswith('#|')]
                row = [time.perf_counter() - t, Path(self._fname).name if getattr(self, '_fname', None) else '?',
                       cell.idx_, (src or [''])[0][:70]]
                with open(Path(out_dir) / f'{os.getpid()}.jsonl', 'a') as f: f.write(json.dumps(row) + '\n')
    CaptureShell.cell = timed
    real_init = CaptureShell.__init__
    def init(self, path=None, *a, **k):
        real_init(self, path, *a, **k); self._fname = path
    CaptureShell.__init__ = init


def _init(cells_dir):
    # what the server imported stays out of the notebook's garbage collections: each full collection walked the
    # ~350,000 objects of torch, timm and matplotlib again, and wrote to each page it walked (copies of the server's
    # pages); `make nbtest` about 5% faster (139 s against 146 s on 2 cores, this line removed for the second)
    gc.freeze()
    _threads()
    if cells_dir: _time_cells(cells_dir)


def _threads():
    """Each notebook process starts with one intra-op torch thread (TIMMDATA_NB_THREADS=N for N, 0 for torch's default):
    N notebooks run at once on a small machine, and a main-process resize with two threads on busy cores takes many
    times longer; a notebook that measures threads sets its own. Also makes runs repeatable: a notebook that set one
    thread used to leave it set for whichever notebook ran next in the same process."""
    if 'fork' in multiprocessing.get_all_start_methods():  # a notebook's kernel starts its workers by the platform's
        multiprocessing.set_start_method('fork', force=True)  # default, not by the forkserver this process came from
    n = int(os.environ.get('TIMMDATA_NB_THREADS', '1'))
    if n > 0:
        import torch
        torch.set_num_threads(n)


# The notebooks that take longest (5 s or more on a 2-core machine), longest first: they start first, so the two at a time
# end together instead of one long notebook running alone at the end while the other core waits (file-name order put
# 25_streaming among the last). Only the order changes: the others follow in file-name order.
LONG_FIRST = ['06_decode.ipynb', '09_resample.ipynb', '49_data_loading_from_first_principles.ipynb', '44_builder.ipynb',
              '48_shards.ipynb', '47_cli.ipynb', '55_simulate.ipynb', '10_transforms.ipynb', '38_loader.ipynb',
              '40_naflex_random_erasing.ipynb', '43_naflex_loader.ipynb', '13_random_erasing.ipynb', '18_transforms_factory.ipynb',
              '25_streaming.ipynb', '45_bench.ipynb', '04_sample_data.ipynb', '04a_photos.ipynb', '37b_mixing.ipynb',
              '37_threads.ipynb', '37b_watch.ipynb']


# imported once by the server the notebooks' processes are forked from (settings are read when used, not on import)
PRELOAD = ['nbdev.test', 'nbdev.showdoc', 'fastcore.test', 'torch', 'torchvision', 'torchvision.transforms.v2', 'timm',
           'timm.data', 'matplotlib.pyplot', 'PIL.Image', 'numpy', 'timmdata.loader', 'timmdata.dataset',
           'timmdata.dataset_factory', 'timmdata.transforms_factory']


# test flags named after setup.py's extras -> the package each needs
EXTRAS = {'hf': 'datasets', 'codec': 'torchcodec', 'tensorboard': 'tensorboard', 'accelerate': 'accelerate',
          'lightning': 'lightning', 'prometheus': 'prometheus_client', 'parquet': 'pyarrow'}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument('--path', default=None, help='a notebook or glob (default: every notebook)')
    ap.add_argument('--n_workers', type=int, default=2, help='notebooks run at the same time')
    ap.add_argument('--flags', default='', help='space-separated test flags to run that are normally skipped (slow cuda)')
    ap.add_argument('--cells', type=int, default=0, help='also print the N slowest cells (seconds, notebook, first line)')
    a = ap.parse_args(argv)
    cfg = get_config()
    skip, force = cfg.tst_flags.split(), a.flags.split()
    # a cell flagged with an optional extra's name needs that extra's package: skipped where it is not installed, and
    # said (a free-threaded build has no wheels for several: the Rust parts of datasets and accelerate, TorchCodec)
    missing = [f for f, m in EXTRAS.items() if f not in force and importlib.util.find_spec(m) is None]
    if missing:
        skip += missing
        print(f"nbtest: not installed: {', '.join(f'{EXTRAS[f]} (timmdata[{f}])' for f in missing)}; "
              f"cells flagged {', '.join(missing)} skipped", flush=True)
    files = [f.absolute() for f in sorted(nbglob(a.path, as_path=True)) if _keep_file(f, '.notest')]
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    files.sort(key=lambda f: rank.get(f.name, len(rank)))  # stable: file-name order within and after them
    if not files: print('nbtest: no notebooks to test'); return 0
    print(f'nbtest: {len(files)} notebooks, {a.n_workers} at a time; cells flagged '
          f"{', '.join(sorted(set(skip) - set(force))) or 'nothing'} skipped; a line as each finishes", flush=True)
    t0, times, failed = time.time(), {}, []
    os.chdir(cfg.nbs_path if cfg.nbs_path.exists() else os.getcwd())
    # each notebook in a process of its own, as `nbdev_test` runs it: what one notebook leaves in its process (a
    # warning said once, an object store's client, whose threads forbid forking its workers after) never meets the next.
    # The processes are forked from a server that has imported once what nearly every notebook imports: nbdev's test
    # runner and show_doc, torch, torchvision, timm, matplotlib and timmdata's top-level modules. A fresh interpreter
    # per notebook paid 2-3 s of imports (torchvision alone about 1 s), 140 times: about a third of the step's time
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload(PRELOAD)
    import tempfile
    cells_dir = tempfile.mkdtemp(prefix='nbtest-cells-') if a.cells else None
    with ProcessPoolExecutor(max(1, a.n_workers), ctx, initializer=_init, initargs=(cells_dir,), max_tasks_per_child=1) as ex:
        futs = {}
        for f in files:
            futs[ex.submit(test_nb, f, skip, force, False, True, cfg.config_path)] = f
            time.sleep(0.01)  # as nbdev_test: a pause between starts
        for k, fut in enumerate(as_completed(futs), 1):
            f = futs[fut]
            try: ok, dt = fut.result()
            except Exception as e: ok, dt = False, 0.; print(f'{f.name}: {type(e).__name__}: {e}', file=sys.stderr)
            times[f.name] = dt
            if not ok: failed.append(f.name)
            print(f"[{k:{len(str(len(files)))}d}/{len(files)}] {'ok  ' if ok else 'FAIL'} {f.name} ({dt:.0f} s; "
                  f'{time.time() - t0:.0f} s so far)', flush=True)
    slow = ', '.join(f'{n} {t:.0f} s' for n, t in sorted(times.items(), key=lambda o: -o[1])[:5])
    print(f'nbtest: {len(files) - len(failed)} of {len(files)} notebooks passed in {time.time() - t0:.0f} s; slowest: {slow}')
    if cells_dir:
        import json
        rows = [json.loads(l) for f in Path(cells_dir).glob('*.jsonl') for l in f.read_text().splitlines()]
        print(f'nbtest: the {a.cells} slowest of {len(rows)} cells ({sum(r[0] for r in rows):.0f} s in all):')
        for dt, nb, i, line in sorted(rows, key=lambda r: -r[0])[: a.cells]: print(f'{dt:6.1f} s  {nb} cell {i}: {line}')
    if failed: print('nbtest: failed: ' + ', '.join(failed), file=sys.stderr); return 1
    return 0


if __name__ == '__main__': sys.exit(main())
