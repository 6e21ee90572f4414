"""Fuzzing the decode paths (issue 14): mutated JPEGs and PNGs through every decode path and the train and eval
transforms must give no crash, no hang, and every failure named (an ImageDecodeError naming the sample and file) or
counted (bad_sample='skip'). The fuzzer is bench/fuzz_decode.py; this file runs it: 300 cases in `make test`, 10,000
with TIMMDATA_SLOW=1 (`TIMMDATA_SLOW=1 .venv/bin/python -m pytest -m slow tests/test_fuzz.py`). The harness itself
(a crash and a hang reported with their case, the run going on) is tested with paths made to crash and hang."""
import importlib.util, os, signal, time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('fuzz_decode', ROOT / 'bench' / 'fuzz_decode.py')
fuzz_decode = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(fuzz_decode)


def check_clean(res, count):
    "Every path saw every case; no crash, no hang, no finding (the report says which case, to reproduce it)."
    text = fuzz_decode.report(res)
    assert not res['crashes'] and not res['hangs'], text
    assert not res['findings'], text
    for name, c in res['counts'].items(): assert sum(c.values()) == count, (name, c)
    # the failures are there and named: the mutations do break images, on every timmdata path
    for name in ('decode_image.tensor', 'decode_image.pil', 'dataset.train', 'dataset.eval'):
        assert res['counts'][name]['named'] > count // 4, text
    assert res['counts']['dataset.eval.prefetcher.skip']['counted'] > count // 4, text
    assert res['counts']['dataset.train']['ok'] > 0 and res['counts']['decode_image.tensor']['ok'] > 0, text
    return text


@pytest.mark.slow
def test_fuzz_300_cases():
    res = fuzz_decode.fuzz(300, seed=14, timeout=60, log=lambda s: None)
    print(check_clean(res, 300))


@pytest.mark.slow
def test_fuzz_10000_cases():
    res = fuzz_decode.fuzz(10_000, seed=0, timeout=120, log=print)
    print(check_clean(res, 10_000))


def test_cases_are_reproducible_and_cover_every_mutation():
    bases = fuzz_decode.base_images()
    assert {n[:3] for n, _ in bases} == {'jpe', 'png'}
    a, b = fuzz_decode.make_case(bases, 3, 77), fuzz_decode.make_case(bases, 3, 77)
    assert a[:2] == b[:2]
    kinds = ' '.join(fuzz_decode.make_case(bases, 0, i)[1] for i in range(300))
    for k in ('bitflip', 'truncate', 'header-bytes', 'huge 60000x60000', 'zeros', 'garbage+jpeg-marker', 'zero-length',
              'random-bytes', 'marker', 'segment', 'chunk', 'splice'):
        assert k in kinds, k


def test_huge_claimed_sizes_are_written_into_the_headers():
    bases = dict(fuzz_decode.base_images())
    import numpy as np, struct
    d, what = fuzz_decode.m_huge(bases['jpeg420'], np.random.default_rng(0))
    h, w = map(int, what.split()[1].split('x'))
    off = next(o for o, m in fuzz_decode._jpeg_segments(d) if m == 0xC0)
    assert struct.unpack('>HH', d[off + 5:off + 9]) == (h, w)


def _crash(d, r, i, env):
    if i == 3: os.kill(os.getpid(), signal.SIGSEGV)
    return True

def _hang(d, r, i, env):
    if i == 5: time.sleep(60)
    return True

def _wrong(d, r, i, env):
    if i == 1: raise KeyError('not a named failure')
    return 'FINDING:shape (2, 2)' if i == 2 else True


@pytest.mark.slow
def test_harness_reports_crashes_hangs_and_findings_and_goes_on():
    res = fuzz_decode.fuzz(8, seed=1, paths={'crash': _crash, 'hang': _hang, 'wrong': _wrong}, timeout=3, log=lambda s: None)
    assert [(c, where, code) for c, _, where, code in res['crashes']] == [(3, 'crash', -signal.SIGSEGV)]
    assert [(c, where) for c, _, where in res['hangs']] == [(5, 'hang')]
    assert sorted(res['findings']) == [('wrong', 'FINDING:KeyError'), ('wrong', 'FINDING:shape (2, 2)')]
    assert res['counts']['crash']['ok'] == 6  # cases 0-2, 4 (before the hang), 6, 7: the run went on
    text = fuzz_decode.report(res)
    assert '--seed 1 --start 3 --count 1' in text and '--seed 1 --start 5 --count 1' in text, text
