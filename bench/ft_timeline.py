"""The stage timeline of a thread-worker epoch, for the picture on nbs/engine/37b_free_threaded.ipynb: which loader
thread made each batch when (from its first sample's read to its collate's end) and when the training thread waited
for a batch and ran its model step. Run it with each interpreter, then draw both (the page reads the JSON files):

    .venv/bin/python bench/ft_timeline.py bench/results/ft_timeline_gil.json
    .ft/venv/bin/python bench/ft_timeline.py bench/results/ft_timeline_ft.json

The epoch: `create_loader` over 240 generated 500x375 photos (24 classes), batch 16 at 224 px, the default training
pipeline, 2 thread workers, device='cpu', and after each batch a CPU model step in the training thread (a small conv
net's forward and backward, one torch thread), as bench/bench_freethreaded.py's 'cpu' step."""
import json, shutil, sys, tempfile, threading, time
from pathlib import Path

import torch
from timmdata import ImageDataset, create_loader, make_sample_dataset
from timmdata.batch.collate import BatchCollate, fast_collate

B = 16


def main(out):
    tmp = Path(tempfile.mkdtemp())
    try:
        root = make_sample_dataset(tmp / 's', n_train=10, n_val=0, classes=[f'c{i:02d}' for i in range(24)], size=(500, 375),
                                   num_workers=0) / 'train'  # fmt: skip
        n = sum(1 for _ in root.rglob('*.JPEG'))
        opened, made, lock = {}, [], threading.Lock()  # per thread: its batch's first read; (maker, start, end) per batch

        class TimedReader:  # the dataset's reader, noting when each thread starts reading a batch
            def __init__(self, reader): self.reader = reader
            def __len__(self): return len(self.reader)
            def __getattr__(self, name): return getattr(self.reader, name)
            def __getitem__(self, i):
                with lock: opened.setdefault(threading.current_thread().name, time.monotonic())
                return self.reader[i]

        class TimedCollate(BatchCollate):  # fast_collate, and which thread made the batch when
            makes_pending = True

            def __call__(self, samples):
                x, y = fast_collate(samples)
                name, end = threading.current_thread().name, time.monotonic()
                w = int(name.rsplit('_', 1)[1]) if name.startswith('timmdata-loader') else 2
                with lock:  # a pass's first batch: its samples read by every thread, collated in the main thread
                    start = opened.pop(name) if w < 2 else min(opened.values(), default=end)
                    if w == 2: opened.clear()
                    made.append((w, start, end))
                return x, y

        torch.set_num_threads(1)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                                  torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
        ds = ImageDataset(str(root))
        ds.reader = TimedReader(ds.reader)
        ld = create_loader(ds, 224, B, is_training=True, num_workers=2, device='cpu', seed=0, worker_mode='thread',
                           collate_fn=TimedCollate())  # fmt: skip
        net(torch.randn(B, 3, 224, 224)).sum().backward()  # warm
        rows, t0, it = [], time.monotonic(), iter(ld)
        while True:
            ask = time.monotonic()
            b = next(it, None)
            if b is None: break
            got = time.monotonic()
            net(b[0]).sum().backward()
            rows.append((ask - t0, got - t0, time.monotonic() - t0))
        spans = [(w, a - t0, b - t0) for w, a, b in made]
        gil = sys._is_gil_enabled() if hasattr(sys, '_is_gil_enabled') else True
        Path(out).write_text(json.dumps(dict(version=sys.version.split()[0], gil=gil, images=n, batch=B, made=spans,
                                             consumer=rows), indent=1))
        print(f'{out}: Python {sys.version.split()[0]}, GIL {"on" if gil else "off"}, {len(rows)} batches, '
              f'epoch {rows[-1][2]:.2f} s, first batch {rows[0][1]:.2f} s')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main(sys.argv[1])
