"""bench/bench_peers.py (issue 46) without any peer installed: its --help runs, and its summary, ratio table and
batch description work on made-up results. No timing is run or asserted here."""
import importlib.util, subprocess, sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / 'bench' / 'bench_peers.py'


@pytest.fixture(scope='module')
def bp():
    spec = importlib.util.spec_from_file_location('bench_peers', SCRIPT)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_help():
    p = subprocess.run([sys.executable, str(SCRIPT), '--help'], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for word in ('--quick', '--rounds', '--only', 'ffcv-uint8', 'dali-cpu', 'grain', 'spdl', 'pil-limit'):
        assert word in p.stdout, word


def test_unknown_contender_is_a_usage_error():
    p = subprocess.run([sys.executable, str(SCRIPT), '--only', 'nosuch'], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and 'nosuch' in p.stderr, p.stderr


def run(name, pipe, rates, cpu, first=1.0, pss=500.0, out='float32 NCHW normalised cpu'):
    return dict(name=name, pipeline=pipe, rates=rates, cpu_ms=cpu, first_batch_s=first, pss_mb=pss, output=out)


def test_summary_and_table(bp):
    runs = [run('timmdata', 'train', [400.0], [1.0], pss=600), run('timmdata', 'train', [600.0], [1.2], pss=650),
            run('timmdata', 'train', [500.0], [1.1]),
            run('ffcv-uint8', 'train', [250.0], [2.2], out='uint8 NCHW (channels-last memory) 0-255 cpu'),
            run('ffcv-uint8', 'train', [250.0], [2.2]),
            run('timmdata', 'eval', [300.0], [2.0]), run('grain', 'eval', [100.0], [5.0], out='uint8 NHWC 0-255 cpu')]
    s = bp.summarise(runs)
    assert sorted(s) == [('ffcv-uint8', 'train'), ('grain', 'eval'), ('timmdata', 'eval'), ('timmdata', 'train')]
    t = s[('timmdata', 'train')]
    assert (t['img_s'], t['cpu'], t['pss_mb'], len(t['rates'])) == (500.0, 1.1, 650, 3)
    table = bp.format_table(s, skipped={'dali-cpu': 'not installed (no wheel)'}, failed={'spdl': 'exit 1: boom'})
    lines = table.splitlines()
    ffcv = next(l for l in lines if l.strip().startswith('ffcv-uint8')).split()
    assert ffcv[1:5] == ['250', '2.00', '2.20', '2.00'], ffcv  # img/s, timmdata 500/250, CPU ms, CPU 2.2/1.1
    grain = next(l for l in lines if l.strip().startswith('grain')).split()
    assert grain[1:5] == ['100', '3.00', '5.00', '2.50'], grain
    assert lines.index('train:') < lines.index('eval:')
    assert 'skipped: dali-cpu: not installed (no wheel)' in table and 'failed: spdl: exit 1: boom' in table
    assert 'uint8 NHWC 0-255 cpu' in table


def test_table_without_timmdata_row(bp):
    "A run where timmdata failed still prints the others, with '-' for the ratios."
    table = bp.format_table(bp.summarise([run('grain', 'train', [100.0], [5.0])]))
    row = next(l for l in table.splitlines() if l.strip().startswith('grain')).split()
    assert row[1:5] == ['100', '-', '5.00', '-'], row


def test_describe(bp):
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    assert bp.describe(x) == 'uint8 NCHW 0-255 cpu'
    assert bp.describe(x.permute(0, 2, 3, 1)) == 'uint8 NHWC 0-255 cpu'
    cl = torch.zeros(2, 8, 8, 3).permute(0, 3, 1, 2)  # NCHW view over channels-last memory, as FFCV's ToTorchImage
    cl[0, 0, 0, 0] = -2.0
    assert bp.describe(cl) == 'float32 NCHW (channels-last memory) normalised cpu'
    assert bp.describe(torch.full((1, 3, 4, 4), 0.5)) == 'float32 NCHW 0-1 cpu'


def test_crop_boxes(bp):
    import random
    rng = random.Random(0)
    for _ in range(200):
        x0, y0, x1, y1 = bp._rrc_box(500, 375, rng)
        assert 0 <= x0 < x1 <= 500 and 0 <= y0 < y1 <= 375
    assert bp._eval_box(500, 375) == pytest.approx((85.9375, 23.4375, 414.0625, 351.5625))


def test_table_from_saved_json(tmp_path):
    "--table-from rewrites the .txt beside a saved run's .json from it, header kept, each round's img/s shown."
    import json
    runs = [run('timmdata', 'eval', [300.0], [1.0]), run('timmdata', 'eval', [500.0], [1.0]),
            run('spdl', 'eval', [200.0], [2.5], out='uint8 NCHW 0-255 cpu')]
    js = tmp_path / 'peers.json'
    js.write_text(json.dumps(dict(header='made-up header\nload: 1.0', runs=runs, skipped={'grain': 'not installed'},
                                  failed={})))
    p = subprocess.run([sys.executable, str(SCRIPT), '--table-from', str(js)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / 'peers.txt').read_text()
    assert text.startswith('made-up header\nload: 1.0\n(table re-rendered from peers.json'), text[:200]
    row = next(l for l in text.splitlines() if l.strip().startswith('timmdata')).split()
    assert row[1] == '400' and '300/500' in row, row
    assert 'skipped: grain: not installed' in text and '  spdl: ' in text.split('what each contender does:')[1]
