"""Issue 15's streaming benchmark: one training epoch of the same images with the same train transform through
create_loader, read (1) from the image folder (ImageDataset), (2) from local WebDataset shards, (3) from the same shards
served by a local HTTP server (`python -m http.server`, started here), and (4) from shards stored pre-resized, when
timmdata.tools.shards.write_shards is there. Medians over `--epochs` epochs (after one warm-up epoch each), alternating the
sources epoch by epoch; prints samples/s and the ratios to the folder (goals: local >= 0.9x, HTTP >= 0.8x,
pre-resized > 1x), and the shard-writing speed. `--local-only` (issue 41): the folder and local shards in both orders,
with each source's CPU per image and its workers' own memory (USS) after the run; with `--eval`, evaluation loaders of the folder
and the shards instead.

    python bench/bench_streaming.py --n 2000 --epochs 3 --workers 2
"""
import argparse, atexit, json, os, shutil, tempfile, time, warnings
from pathlib import Path
import torch
from timmdata import ImageDataset, create_loader, make_sample_dataset
from timmdata.streams.streaming import IterableImageDataset
from _common import alternate_epochs, http_server, print_rates, train_loaders


def uss(pid: int) -> int:
    "Unique set size of process `pid` in bytes (0 when it is gone): its private pages, what it holds itself. Unlike PSS it does not depend on when a worker was forked (loaders made later share more of their parent's pages)."
    try:
        return sum(int(line.split()[1]) * 1024 for line in open(f'/proc/{pid}/smaps_rollup') if line.startswith('Private_'))
    except OSError: return 0


def _write_shards(folder, dst, shard_size, resize=None):
    "Shards in timm's layout: timmdata.tools.shards.write_shards when it is there, else webdataset.ShardWriter. Returns seconds."
    t0 = time.perf_counter()
    try: from timmdata.tools.shards import write_shards
    except ImportError: write_shards = None
    if write_shards is not None:
        write_shards(folder, dst, shard_size=shard_size, resize=resize, split='train', progress=False)
        return time.perf_counter() - t0
    if resize is not None: return None
    import webdataset as wds
    ds = ImageDataset(folder, load_bytes=True)
    dst.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(dst / 'train-%06d.tar'), maxcount=shard_size, verbose=0) as w:
        for i in torch.randperm(len(ds), generator=torch.Generator().manual_seed(0)).tolist():
            data, y = ds[i]; w.write({'__key__': f's{i:07d}', 'jpg': data, 'cls': y})
    names = sorted(p.name for p in dst.glob('train-*.tar'))
    lengths = [min(shard_size, len(ds) - k * shard_size) for k in range(len(names))]
    (dst / '_info.json').write_text(json.dumps({'name': 'bench', 'splits': {'train': {
        'name': 'train', 'num_samples': len(ds), 'filenames': names, 'shard_lengths': lengths}}}))
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--n', type=int, default=2000, help='training images (about 500x375 JPEGs)')
    ap.add_argument('--epochs', type=int, default=3, help='timed epochs per source (after one warm-up epoch)')
    ap.add_argument('--workers', type=int, default=min(8, os.cpu_count() or 1), help='loader workers')
    ap.add_argument('--batch-size', type=int, default=64)
    ap.add_argument('--input-size', type=int, default=224)
    ap.add_argument('--resize', type=int, default=256, help='shorter side of the pre-resized shards')
    ap.add_argument('--root', default=None, help='work folder (default: a temporary one)')
    ap.add_argument('--shards', type=int, default=None, help='number of shards (default: 4 per worker)')
    ap.add_argument('--local-only', action='store_true', help='folder and local shards in both orders only (issue 41)')
    ap.add_argument('--eval', action='store_true', help='with --local-only: evaluation loaders (folder, local shards) instead')
    a = ap.parse_args()
    tmp = Path(a.root or tempfile.mkdtemp(prefix='bench_streaming_'))
    if not a.root: atexit.register(shutil.rmtree, tmp, True)  # a temporary work folder goes when the run ends
    data = make_sample_dataset(tmp / 'images', n_train=max(1, a.n // 10), n_val=1, size=(500, 375))
    folder = data / 'train'
    n = len(ImageDataset(folder))
    shard_size = -(-n // a.shards) if a.shards else max(1, n // (4 * max(1, a.workers)))  # default 4 shards a worker
    secs = _write_shards(folder, tmp / 'shards', shard_size)
    mb = sum(p.stat().st_size for p in (tmp / 'shards').glob('*.tar')) / 2**20
    print(f'{n} images, {a.workers} workers, batch {a.batch_size}, input {a.input_size}, shards of {shard_size}: '
          f'wrote {mb:.0f} MB of shards in {secs:.1f} s ({n / secs:.0f} images/s)')
    rs = None if a.local_only else _write_shards(folder, tmp / 'shards_small', shard_size, resize=a.resize)
    if rs is not None:
        mbs = sum(p.stat().st_size for p in (tmp / 'shards_small').glob('*.tar')) / 2**20
        print(f'pre-resized (shorter side {a.resize}): {mbs:.0f} MB in {rs:.1f} s ({n / rs:.0f} images/s)')
    kw = dict(is_training=True, batch_size=a.batch_size)
    if a.local_only:  # the same images from the folder and from local shards, read in the global order and shard by shard
        sources = {'folder': lambda: ImageDataset(folder),
                   'shards, global order': lambda: IterableImageDataset(tmp / 'shards', reader='wds/bench', order='global', **kw),
                   'shards, shards order': lambda: IterableImageDataset(tmp / 'shards', reader='wds/bench', order='shards', **kw)}
        if a.eval:  # every sample once, resize and centre crop: the shards read in their listed order
            sources = {'folder': sources['folder'],
                       'shards': lambda: IterableImageDataset(tmp / 'shards', reader='wds/bench', batch_size=a.batch_size)}
        cpu = {}
        loaders = {name: (ds, create_loader(ds, a.input_size, a.batch_size, is_training=False, num_workers=a.workers,
                                            persistent_workers=True, device='cpu'))
                   for name, ds in ((name, make()) for name, make in sources.items())} if a.eval else train_loaders(sources, a)
        print_rates(alternate_epochs(loaders, a.epochs, cpu), 'folder', 'x folder', cpu=cpu)
        from timmdata.tools.bench import worker_pids  # persistent workers: alive after their last epoch
        print("each loader's workers' own memory after the run (USS: pages no other process shares, MB): " + ', '.join(
            f'{k} {sum(uss(p) for p in worker_pids(l)) / 2**20:.0f}' for k, (_, l) in loaders.items()))
        return
    with http_server(tmp / 'shards') as url:
        sources = {'folder': lambda: ImageDataset(folder),
                   'local shards': lambda: IterableImageDataset(tmp / 'shards', reader='wds/bench', **kw),
                   'http shards': lambda: IterableImageDataset(url, reader='wds/bench', **kw)}
        if rs is not None: sources['pre-resized shards'] = lambda: IterableImageDataset(tmp / 'shards_small', reader='wds/bench', **kw)
        print_rates(alternate_epochs(train_loaders(sources, a), a.epochs), 'folder', 'x folder')


if __name__ == '__main__':
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)
        main()
