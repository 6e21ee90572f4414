"""`check_images` (and `timmdata check`) over folders of Parquet files (nbs/tools/46_check.ipynb): the rows read one row
group at a time, whatever the file's size; the Hub's other layout ({config}/{split}/0000.parquet) found without a
reader named; files written by Hugging Face `datasets`, a damaged image among them named by its file and row."""

import io
from pathlib import Path

import pytest
from PIL import Image

pytest.importorskip('pyarrow')
from timmdata.parquet.source import ParquetSource
from timmdata.parquet.parquet_files import write_sample_parquet
from timmdata.tools.check import check_images, check_parquet


def _jpeg(i: int) -> bytes:
    b = io.BytesIO()
    Image.new('RGB', (24, 16), (i * 9 % 256, 40, 90)).save(b, 'JPEG')
    return b.getvalue()


def test_rows_are_read_a_row_group_at_a_time(tmp_path, monkeypatch):
    "Each read is one row group of one file (never a file whole), every row group is read once, and every row checked."
    write_sample_parquet(tmp_path, [(_jpeg(i), i % 3) for i in range(50)], ['a', 'b', 'c'], files=2, row_group_size=7)
    reads, real = [], ParquetSource.read_group

    def spy(self, s, g, read_at=None):
        got = real(self, s, g, read_at)
        reads.append((self.shards[s].rsplit('/', 1)[-1], g, len(got[0])))
        return got

    monkeypatch.setattr(ParquetSource, 'read_group', spy)
    r = check_parquet(tmp_path, num_workers=0, progress=False)
    assert r.ok and r.checked == 50 and r.files == 2, r
    want = [(f'train-0000{k}-of-00002.parquet', g) for k in range(2) for g in range(4)]  # 25 rows a file: 7, 7, 7, 4
    assert [x[:2] for x in reads] == want, reads
    assert [x[2] for x in reads] == [7, 7, 7, 4] * 2, reads


def test_the_hubs_config_split_layout(tmp_path):
    "`{config}/{split}/0000.parquet`: found under the root without a reader named; a split checked alone; a damaged row named by file and row."
    rows = [(_jpeg(i), i % 2) for i in range(12)]
    rows[5] = (rows[5][0][:200], 1)
    for split in ('train', 'test'):
        (p,) = write_sample_parquet(tmp_path / 'tmp' / split, rows, ['a', 'b'], files=1, row_group_size=4)
        (tmp_path / 'plain' / split).mkdir(parents=True)
        Path(p).rename(tmp_path / 'plain' / split / '0000.parquet')
    r = check_images(tmp_path / 'plain', num_workers=0, progress=False)
    assert r.files == 2 and r.checked == 24 and [(b.filename, b.row) for b in r.bad] == [
        ('test/0000.parquet', 5),
        ('train/0000.parquet', 5),
    ], r.bad
    r = check_images(tmp_path / 'plain', num_workers=0, progress=False, split='train')
    assert r.files == 1 and [str(b).split(': ')[0] for b in r.bad] == ['train/0000.parquet row 5'], r.bad


def test_files_written_by_datasets(tmp_path):
    "`datasets`' `to_parquet` in the Hub's layout: a clean file passes; a damaged image is named by its file and row."
    datasets = pytest.importorskip('datasets')
    imgs = [_jpeg(i) for i in range(20)]
    imgs[13] = b'not a jpeg at all'
    d = datasets.Dataset.from_dict({'image': [{'bytes': b, 'path': None} for b in imgs], 'label': [i % 2 for i in range(20)]})
    d = d.cast_column('image', datasets.Image()).cast_column('label', datasets.ClassLabel(names=['cat', 'dog']))
    (tmp_path / 'data').mkdir()
    d.to_parquet(str(tmp_path / 'data' / 'train-00000-of-00001.parquet'), batch_size=8)
    r = check_images(tmp_path, num_workers=2, progress=False)
    assert r.checked == 20 and [(b.filename, b.row, b.kind) for b in r.bad] == [
        ('data/train-00000-of-00001.parquet', 13, 'error')
    ], r.bad
    assert 'not an image Pillow can read' in r.bad[0].reason, r.bad[0]
