#!/usr/bin/env python
"""Run timm's own data tests with `timm.data` pointed at timmdata: the acceptance test of issue 40.

A timm user changes one import; the strictest such user is timm's test suite. This tool runs timm's data tests
with an import hook installed before they import anything: `timm.data` is `timmdata`, and `timm.data.X` is
`timmdata.X` where timmdata has a module X (`timm.data.readers.reader_wds` -> `timmdata.readers.reader_wds`);
a `timm.data.X` that timmdata lacks is a `ModuleNotFoundError` naming the timmdata module, never timm's own. The rest of
timm (`timm.models`, `timm.loss`, `timm.task`) is timm's, and sees timmdata wherever it imports `timm.data`.
`--against timm` runs the same files on timm itself, for comparison.

Getting timm's test files (they are not part of this repository; keep them outside it, e.g. /tmp/timm_tests):

    mkdir -p /tmp/timm_tests /tmp/timm_sdist && cd /tmp/timm_sdist
    pip download timm==1.0.31 --no-binary :all: --no-deps     # the sdist carries timm 1.0.31's tests/
    tar xzf timm-1.0.31.tar.gz
    cp timm-1.0.31/tests/test_{data,dataset_info,multilabel,naflex_dataset,reader_wds,scheduled_sampler}.py /tmp/timm_tests/

and `tests/test_distributed_sampler.py` from github.com/huggingface/pytorch-image-models (main; it is newer than
the 1.0.31 sdist) into the same folder.

The command (from the repository root; `PYTHONPATH=$PWD` makes this tree's timmdata the one tested):

    PYTHONPATH=$PWD python tools/run_timm_data_tests.py /tmp/timm_tests --against both --failures

It prints, per file, passed/failed/skipped for each side, the totals, and with `--failures` the failing test ids
(with `--reasons`, the last line of each failure's error). `--json PATH` writes all of it.

Failures that are not part of the promise (a timm user's code does not do this):
- tests of timm's private methods: `_prepare_epoch_batches` (test_naflex_dataset: epoch_batches_are_prepared...,
  persistent_workers_read_shared_epoch, epoch_prep_warnings_only_emitted_by_worker_zero), `_create_sample_budget_schedule`
  and `_create_fixed_batch_schedule` (test_scheduled_sampler: ..._is_created_once_and_cached, ..._is_created_when_iteration_starts),
  `timm.data.readers._hfds` (test_multilabel: hf_remote_code_kwargs, hf_class_metadata_with_custom_column);
- test_multilabel's CLI tests import timm's `train.py`, `validate.py` and `class_weights.py`, which the timm package does not
  install: they fail on timm too, unless `--scripts DIR` names a folder holding the repository's scripts (of timm 1.0.31).
"""

import argparse
import importlib
import importlib.abc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path


class _Alias(importlib.abc.Loader):
    "Loads `timm.data...` as the already imported timmdata module of the same name."

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.spec  # importlib set the alias's spec: timmdata's own finds its files


class TimmDataShim(importlib.abc.MetaPathFinder):
    "`timm.data` -> `timmdata`, `timm.data.X` -> `timmdata.X`; a missing X is an error, never timm's module."

    prefix = 'timm.data'

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.prefix and not fullname.startswith(self.prefix + '.'):
            return None
        name = 'timmdata' + fullname[len(self.prefix) :]
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(f'No module named {fullname!r}: timmdata has no module {name!r}', name=fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(name))


def install_shim():
    "Install the hook; must run before anything imports `timm.data` (timm's own `timm/__init__` does)."
    if any(k == 'timm.data' or k.startswith('timm.data.') for k in sys.modules):
        raise RuntimeError('timm.data is already imported: install the shim first')
    sys.meta_path.insert(0, TimmDataShim())


class _Collect:
    "pytest plugin: one outcome per test id (a failing setup or teardown counts as failed)."

    def __init__(self):
        self.outcomes, self.reasons = {}, {}

    def pytest_runtest_logreport(self, report):
        if report.when == 'call' or report.outcome != 'passed':
            prev = self.outcomes.get(report.nodeid)
            if prev == 'failed':
                return
            self.outcomes[report.nodeid] = report.outcome
            if report.outcome == 'failed':
                crash = getattr(report.longrepr, 'reprcrash', None)
                self.reasons[report.nodeid] = crash.message.splitlines()[0] if crash else str(report.longrepr)[-300:]

    def pytest_collectreport(self, report):
        if report.outcome == 'failed':
            self.outcomes[report.nodeid or 'collection'] = 'failed'
            self.reasons[report.nodeid or 'collection'] = str(report.longrepr).strip().splitlines()[-1][:300]


def _run_one(against, tests, out, pytest_args, scripts=None):
    "Child process: install the shim (for timmdata), run pytest, write the outcomes as JSON."
    if scripts:
        sys.path.insert(0, str(scripts))  # timm's train.py, validate.py, class_weights.py, which its CLI tests import
    if against == 'timmdata':
        install_shim()
    import pytest

    collect = _Collect()
    args = [str(tests), '-q', '-p', 'no:cacheprovider', '-p', 'no:randomly', '--rootdir', str(tests), *pytest_args]
    rc = pytest.main(args, plugins=[collect])
    mod = sys.modules.get('timm.data')
    where = getattr(mod, '__file__', None)
    Path(out).write_text(
        json.dumps(dict(rc=int(rc), module=where, outcomes=collect.outcomes, reasons=collect.reasons), indent=1)
    )


def run(against, tests, pytest_args=(), scripts=None):
    "Run the tests in a fresh interpreter (the shim must come before any import of timm) and read its outcomes."
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / 'out.json'
        cmd = [sys.executable, __file__, '--child', against, '--out', str(out), str(tests)]
        cmd += ['--scripts', str(scripts)] if scripts else []
        cmd += ['--', *pytest_args]
        subprocess.run(cmd, stdout=subprocess.DEVNULL if not os.environ.get('TIMM_TESTS_VERBOSE') else None)
        if not out.exists():
            raise SystemExit(f'the {against} run wrote no results (run with TIMM_TESTS_VERBOSE=1 to see pytest)')
        return json.loads(out.read_text())


def per_file(outcomes):
    counts = defaultdict(Counter)
    for nodeid, outcome in outcomes.items():
        counts[nodeid.split('::')[0]][outcome] += 1
    return counts


def report(results, show_failures, show_reasons):
    files = sorted({f for r in results.values() for f in per_file(r['outcomes'])})
    sides = list(results)
    head = f'{"file":36}' + ''.join(f'{s + " pass/fail/skip":>28}' for s in sides)
    print(head)
    totals = {s: Counter() for s in sides}
    for f in files:
        row = f'{f:36}'
        for s in sides:
            c = per_file(results[s]['outcomes'])[f]
            totals[s].update(c)
            row += f'{c["passed"]:>18}/{c["failed"]:>4}/{c["skipped"]:>4}'
        print(row)
    row = f'{"total":36}'
    for s in sides:
        c = totals[s]
        row += f'{c["passed"]:>18}/{c["failed"]:>4}/{c["skipped"]:>4}'
    print(row)
    for s in sides:
        print(f'{s}: timm.data was {results[s]["module"]}')
    if show_failures:
        for s in sides:
            failed = [k for k, v in results[s]['outcomes'].items() if v == 'failed']
            print(f'\n{s}: {len(failed)} failed')
            for k in failed:
                print(f'  {k}' + (f'\n      {results[s]["reasons"].get(k, "")}' if show_reasons else ''))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('tests', type=Path, help="folder holding timm's test files (see above for how to get them)")
    p.add_argument('--against', choices=['timmdata', 'timm', 'both'], default='timmdata')
    p.add_argument('--failures', action='store_true', help='list the failing test ids')
    p.add_argument('--reasons', action='store_true', help="with --failures: each failure's error line")
    p.add_argument('--json', type=Path, help='write outcomes and reasons here')
    p.add_argument(
        '--scripts', type=Path, help="folder with timm's train.py, validate.py, class_weights.py (CLI tests)"
    )
    p.add_argument('--child', help=argparse.SUPPRESS)
    p.add_argument('--out', help=argparse.SUPPRESS)
    p.epilog = 'Arguments after -- go to pytest (e.g. -- -k naflex -x).'
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index('--') if '--' in argv else len(argv)
    a = p.parse_args(argv[:cut])
    a.pytest_args = argv[cut + 1 :]
    if not a.tests.is_dir() or not list(a.tests.glob('test_*.py')):
        p.error(f'{a.tests} holds no test_*.py files: fetch timm\'s tests as this tool\'s --help says')
    if a.child:
        return _run_one(a.child, a.tests.resolve(), a.out, a.pytest_args, a.scripts)
    sides = ['timm', 'timmdata'] if a.against == 'both' else [a.against]
    scripts = a.scripts.resolve() if a.scripts else None
    results = {s: run(s, a.tests.resolve(), a.pytest_args, scripts) for s in sides}
    report(results, a.failures, a.reasons)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 1 if any(v == 'failed' for r in results.values() for v in r['outcomes'].values()) else 0


if __name__ == '__main__':
    sys.exit(main())
