"""Issue 45's GPU kit, the parts a CPU can check: the timeline's reading of a profiler trace (which stream ran what,
and the GPU's idle share of the steps' wall time), and the end-to-end run's reading of timm's train.py log lines.
The kit itself runs on the GPU machine: bash tools/gpu_kit.sh here, then bash tools/gpu_run.sh tests|bench|train there."""
import importlib.util, json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(rel):
    spec = importlib.util.spec_from_file_location(Path(rel).stem, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _trace(tmp_path, events):
    p = tmp_path / 'trace.json'
    p.write_text(json.dumps({'traceEvents': [dict(ph='X', **e) for e in events]}))
    return p


@pytest.mark.slow
def test_timeline_reads_streams_and_idle_share(tmp_path):
    gt = _load('bench/gpu_timeline.py')
    p = _trace(tmp_path, [
        dict(cat='user_annotation', name='ProfilerStep#2', ts=0, dur=500),
        dict(cat='user_annotation', name='ProfilerStep#3', ts=500, dur=500),
        dict(cat='kernel', name='conv', ts=100, dur=300, args={'stream': 7}),
        dict(cat='kernel', name='bn', ts=600, dur=200, args={'stream': 7}),
        dict(cat='gpu_memcpy', name='Memcpy HtoD', ts=350, dur=150, args={'stream': 13}),  # overlaps the conv by 50
        dict(cat='gpu_memset', name='Memset', ts=1100, dur=50, args={'stream': 7}),  # after the steps: not counted
        dict(cat='cpu_op', name='aten::add', ts=0, dur=1000),  # the CPU's: not the GPU's
    ])
    streams, steps = gt._gpu_intervals(p)
    assert steps == [(0, 500), (500, 1000)]
    assert sorted(streams) == [7, 13] and len(streams[7]) == 3 and [k for *_, k, _ in streams[13]] == ['copy']
    # busy: 100-500 (the kernel and the copy together) and 600-800, 600 us of the 1000: idle 40%
    assert gt._idle(streams, (0, 1000)) == pytest.approx(0.4)
    assert gt._idle({}, (0, 1000)) is None  # a CPU run: no figure rather than 100%
    res = dict(prefetch=True, images_per_s=1000.0, gpu_idle_fraction=0.4, window_us=(0, 1000), streams={})
    gt.plot([(res, streams, (0, 1000)), (dict(res, prefetch=False), {}, None)], tmp_path / 't.png')
    assert (tmp_path / 't.png').stat().st_size > 1000


def test_timeline_trace_holds_the_profiled_steps(tmp_path):
    "The trace is written when the traced steps end: their annotations are in it (written after, it was empty)."
    import torch
    gt = _load('bench/gpu_timeline.py')

    def run(prof, n=2 + 3):
        for _ in range(n):
            torch.ones(64, 64) @ torch.ones(64, 64)
            prof.step()

    gt.profile(run, torch.device('cpu'), 3, tmp_path / 'trace.json')
    streams, steps = gt._gpu_intervals(tmp_path / 'trace.json')
    assert len(steps) == 3 and streams == {}  # three steps traced; no GPU on the CPU


def test_train_log_lines_and_summary(tmp_path):
    ts = _load('tools/timm_script.py')
    line = ('Train: 1 [  10/39 ( 28%)]  Loss: 6.91 (6.93)  Time: 0.080s, 3200.00/s  (0.085s, 3011.76/s)  '
            'LR: 1.000e-01  Data: 0.004 (0.006)')
    m = ts.TRAIN.search(line)
    assert m and (m[1], m[2], m[3], float(m[4]), float(m[5]), float(m[6]), float(m[7]), float(m[8]), float(m[9])) == (
        '1', '10', '39', 0.08, 3200.0, 0.085, 3011.76, 0.004, 0.006)
    assert ts.TRAIN.search('Test: [   0/1]  Time: 0.5 (0.5)  Loss:  2.3 (2.3)') is None
    # (epoch, step rate, step data share, the epoch's average rate, its average data share)
    assert ts.parse(line) == pytest.approx((1, 3200.0, 0.05, 3011.76, 0.006 / 0.085))
    # the last epoch's last line gives the throughput; epoch 0 (warm-up) is left out; the step rates' median beside it
    rows = [(0.0, *ts.parse(line.replace('Train: 1', f'Train: {e}').replace('(0.085s, 3011.76/s)', f'({t}s, {r}/s)')))
            for e, t, r in ((0, 0.2, 1280.0), (1, 0.1, 2560.0), (1, 0.09, 2844.4), (2, 0.085, 3011.76))]
    got = ts.throughput(rows)
    assert got['images_per_s'] == 3011.76 and got['data_wait_share'] == pytest.approx(0.006 / 0.085)
    assert got['step_rate_median'] == 3200.0 and ts.throughput([]) == dict(images_per_s=None, data_wait_share=None,
                                                                          step_rate_median=None)
    # --relog: a saved log's lines recomputed into a report
    (tmp_path / 'train.log').write_text('\n'.join(['noise', line, line.replace('Train: 1 [  10', 'Train: 1 [  38')]))
    (tmp_path / 'r.json').write_text(json.dumps(dict(data='timm', images_per_s=1.0)))
    assert ts.main(['--relog', str(tmp_path / 'train.log'), '--report', str(tmp_path / 'r.json')]) == 0
    r = json.loads((tmp_path / 'r.json').read_text())
    assert r['images_per_s'] == 3011.76 and r['log_lines'] == 2 and r['data'] == 'timm'
    reports = []
    for data, ips in (('timm', 1000.0), ('timmdata', 2500.0), ('timmdata-device', None)):
        r = dict(data=data, exit=0 if ips else 1, images_per_s=ips, data_wait_share=0.1 if ips else None,
                 gpu_util_mean=80.0 if ips else None, gpu_idle_fraction=0.2 if ips else None)
        reports.append(tmp_path / f'{data}.json')
        reports[-1].write_text(json.dumps(r))
    rows = ts.summary(reports).splitlines()
    assert len(rows) == 4
    assert rows[2].split()[:4] == ['timmdata', '0', '2,500', '2.50'] and rows[2].split()[-1] == '20.0%'
    assert rows[3].split() == ['timmdata-device', '1']  # a failed run: its exit, and no figures


def test_summary_cores4_randaug_and_decode_limit(tmp_path):
    "summary.json's train_py.cores4 and .randaug from their reports, each over its own model alone; the decode limit."
    gs = _load('tools/gpu_summary.py')

    def report(name, img_s, cpus=16):
        cpu = dict(main_process_cores=1.0, main_thread_cores=0.5, children_cores=2.5, total_cores=3.5, usable_cpus=cpus)
        (tmp_path / f'train_{name}.json').write_text(json.dumps(dict(exit=0, steady=dict(
            img_s=img_s, gpu_busy=90.0, data_wait_s=0.001, data_wait_share=0.02, cpu=cpu))))

    (tmp_path / 'model_alone.json').write_text(json.dumps(dict(img_s=5000.0, img_s_nosync=5200.0)))
    (tmp_path / 'model_alone_cores4.json').write_text(json.dumps(dict(img_s=4000.0)))
    report('timmdata', 4500.0)
    report('cores4_timmdata', 3600.0, cpus=4)
    report('cores4_timmdata-device', 2000.0, cpus=4)
    report('cores4_timmdata-device-matmul', 1800.0, cpus=4)
    report('randaug_timm', 2500.0)
    (tmp_path / 'bench_gpu.json').write_text(json.dumps(dict(pipelines=dict(
        train=dict(img_per_s=dict(timmdata_device=8000.0, decode_limit=14000.0), cpu_s_per_img=dict(decode_limit=7e-5),
                   resize=dict(timmdata_device='kernel', timmdata_device_matmul='matmul: asked for')),
        eval=dict(img_per_s=dict(timmdata_device=6000.0, decode_limit=15000.0))))))
    s = gs.summarise(tmp_path)
    t = s['train_py']
    assert t['timmdata']['img_s'] == 4500.0 and t['timmdata']['x_model_alone'] == pytest.approx(0.9)
    c4 = t['cores4']
    assert c4['model_alone'] == 4000.0 and sorted(c4) == ['model_alone', 'timm', 'timmdata', 'timmdata_device', 'timmdata_device_matmul']
    assert c4['timmdata']['x_model_alone'] == pytest.approx(0.9) and c4['timmdata']['cpus'] == 4  # over the 4-core one
    assert c4['timmdata_device']['img_s'] == 2000.0 and c4['timm']['img_s'] is None and c4['timm']['exit'] is None
    assert c4['timmdata_device_matmul']['x_model_alone'] == pytest.approx(0.45)  # the resize in products, its A/B
    ra = t['randaug']
    assert sorted(ra) == ['timm', 'timmdata', 'timmdata_device', 'timmdata_device_matmul']
    assert ra['timm']['x_model_alone'] == pytest.approx(0.5)
    assert ra['timm']['worker_cores'] == 2.5 and ra['timmdata']['img_s'] is None
    assert s['loader']['train']['decode_limit'] == 14000.0 and s['loader']['eval']['decode_limit'] == 15000.0
    assert s['resize']['train'] == {'timmdata_device': 'kernel', 'timmdata_device_matmul': 'matmul: asked for'}
    assert s['resize']['eval'] == {}
    assert s['cpu_ms_per_img']['train']['decode_limit'] == pytest.approx(0.07) and s['loader']['train']['timm'] is None
    json.dumps(s)  # what summary.json is written from


def test_steady_rate_counts_the_stalls():
    "img_s is the span's images over its time: a stall every fourth step lowers it; the median step's rate does not."
    ts = _load('tools/timm_script.py')
    # (time, epoch, step, steps, step seconds, step rate, data seconds): three 0.05 s steps, then one of 1.05 s
    span = [(0.0, 1, i, 40, t, 256 / t, t - 0.05) for i, t in enumerate([0.05, 0.05, 0.05, 1.05] * 5)]
    got = ts.steady(span)
    assert got['steps_measured'] == 20
    assert got['img_s'] == pytest.approx(20 * 256 / (5 * 1.2))
    assert got['img_s_median'] == pytest.approx(256 / 0.05)
    assert got['data_wait_share'] == pytest.approx(5 * 1.0 / (5 * 1.2))
