"""What each part of the ring's change gives: `python bench/results/device_workers_2026-11-28/parts.py WHICH` runs
bench/bench_device_workers.py --n 3000 with the loader's collate cut down to one part; its `ring` line is then that
part (its `torch` line is torch's sharing as always). WHICH: 'ring-only' (the bytes in the ring, the small tensors
through torch's sharing), 'by-value-only' (no ring, the small tensors by value), 'both' (the loader's own)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
import bench_device_workers as b  # noqa: E402
import timmdata.engine.device_plan as dp  # noqa: E402

which = sys.argv[1]
if which == 'ring-only':
    dp.SMALL_BY_VALUE = -1  # nothing small enough: every tensor through torch's sharing
elif which == 'by-value-only':
    choose = dp.DeviceCollate.choose.__func__
    dp.DeviceCollate.choose = classmethod(lambda cls, bs, nw, s: choose(cls, bs, 0, s))  # no ring
elif which != 'both':
    raise SystemExit(f"WHICH: ring-only, by-value-only or both; got {which!r}")
print(which)
b.main(['--n', '3000'])
