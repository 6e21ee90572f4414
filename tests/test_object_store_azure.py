"""Datasets in Azure Blob Storage (az://), read end to end against Azurite, Microsoft's Azure Storage emulator, started
for these tests on this machine (tests/_azurite.py; `make test-deps` installs it with npm). The same datasets as the S3
tests: WebDataset shards with and without their dataset index, Parquet folders with and without theirs; each gives the
batches a local read of the same files gives, with worker processes too; `timmdata index` writes into the container,
`timmdata check` decodes there; a missing blob and a wrong account key are named in one line.
All slow (`make test-all`): Azurite's start and each dataset's upload take seconds; the S3 and GCS emulators' tests,
through the same object-store code, run in `make test`."""

import os, sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip('obstore')
pytest.importorskip('pyarrow')
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _azurite import Azurite, azurite_command  # noqa: E402
from _helpers import REMOTE_KINDS, assert_read_as_local, epoch_labels, remote_test_datasets, run_cli  # noqa: E402

if azurite_command() is None:
    pytest.skip('Azurite (npm package azurite) is not installed: make test-deps installs it where npm is',
                allow_module_level=True)

from timmdata import create_dataset  # noqa: E402
from timmdata.net.object_store import close_clients, put_object  # noqa: E402

N, BATCH = 24, 6  # samples (one a class: a batch's labels say which samples it holds), batch size


def _upload(az, folder: Path, prefix: str) -> str:
    for f in sorted(folder.rglob('*')):
        if f.is_file():
            put_object(az.url(f'{prefix}/{f.relative_to(folder).as_posix()}'), f.read_bytes())
    return az.url(prefix)


@pytest.fixture(scope='module')
def az(tmp_path_factory):
    "Azurite with the sample-data generator's 24 images as shards (with their index, and a copy without) and as Parquet folders (with and without an index)."
    root = remote_test_datasets(tmp_path_factory.mktemp('azdata'), N)
    with Azurite() as store:
        os.environ.update(store.environment())
        close_clients()  # clients made before point elsewhere
        try:
            for name in ('shards', 'plain', 'pq', 'pq_plain'):
                _upload(store, root / name, name)
            store.root = root
            yield store
        finally:
            close_clients()  # (conftest puts the environment and the start method back when the file ends)


@pytest.mark.parametrize('kind', list(REMOTE_KINDS))
def test_every_sample_once_and_as_local(az, kind):
    "Each kind of dataset over az:// gives, without workers and with two (started by forkserver), the batches a local read of the same files gives."
    assert_read_as_local(kind, az.root, az.url, N, BATCH)


@pytest.mark.slow
def test_index_and_check_in_the_container(az):
    "`timmdata index` writes the dataset index into the container and the stream reads it; `timmdata check` decodes every image there."
    plain = _upload(az, az.root / 'plain', 'to_index')
    out = run_cli('index', plain)
    assert out.returncode == 0 and '_timmdata_dataset_index.json' in out.stdout, out.stderr
    indexed = epoch_labels('wds/x', plain, 'train', 0, BATCH)
    assert len(indexed) == N // BATCH and indexed == epoch_labels('wds/x', str(az.root / 'shards'), 'train', 0, BATCH)
    for root, more in ((az.url('pq'), []), (az.url('shards'), ['--split', 'train'])):
        out = run_cli('check', root, '--workers', '0', '--no-progress', *more)
        assert out.returncode == 0 and f'checked {N} images' in out.stdout, (out.stdout, out.stderr)


def test_missing_blob_and_wrong_key_named(az):
    "A blob that is not there and an account key the service refuses: each one line naming the URL, no key shown."
    with pytest.raises(FileNotFoundError, match='az://data/nothing/here'):
        create_dataset('wds/x', root=az.url('nothing/here'), split='train', batch_size=BATCH)
    wrong = 'A' * 86 + '=='
    out = run_cli('check', az.url('pq'), '--workers', '0', '--no-progress',
           env={**os.environ, 'AZURE_STORAGE_ACCOUNT_KEY': wrong})
    assert out.returncode == 2 and out.stderr.count('\n') == 1, out.stderr
    assert 'az://data/pq' in out.stderr and wrong not in out.stderr, out.stderr
