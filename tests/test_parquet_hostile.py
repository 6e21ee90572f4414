"""Hostile Parquet files made from files pyarrow writes (nbs/parquet/26c_parquet_format.ipynb): footers that lie about
rows and sizes, page headers of the wrong types, and a fuzzer of page headers and footers. Every file is read or
refused with a ParquetError (a ShardError: it reaches bad_sample handling), in bounded memory and time."""

import io, os, random, time
import pytest
from PIL import Image

pa = pytest.importorskip('pyarrow')
from _parquet_craft import (
    column_meta,
    join_file,
    page_offsets,
    read_struct,
    row_group,
    set_field,
    split_file,
    write_struct,
)
from timmdata.sources.shard_io import ShardError
from timmdata.parquet.source import ParquetError, ParquetSource, write_parquet_index, write_sample_parquet
from timmdata.parquet.parquet_format import CODECS, check_footer, chunk_rows, find_columns, footer_bytes, parse_footer

NAME = 'train-00000-of-00001.parquet'


def _jpeg(i):
    b = io.BytesIO()
    Image.new('RGB', (20, 16), (i * 4 % 256, 30, 60)).save(b, 'JPEG')
    return b.getvalue()


def _file(folder, samples, **kw) -> bytes:
    "The bytes of one Parquet file of `samples` as the Hub lays it out under `folder`."
    write_sample_parquet(folder, samples, ['a', 'b', 'c'], files=1, **kw)
    return (folder / 'data' / NAME).read_bytes()


def _put(folder, data: bytes):
    (folder / 'data').mkdir(parents=True, exist_ok=True)
    (folder / 'data' / NAME).write_bytes(data)
    for old in folder.glob('_timmdata_parquet_index*'):
        old.unlink()


def test_rows_bounded_by_their_bytes(tmp_path):
    "A footer of a ~2 KB file stating 100 million rows is refused at open and by `timmdata index`, before anything is sized by the rows."
    body, md = split_file(_file(tmp_path / 'ok', [(bytes([i]) * 50, i % 3) for i in range(8)], row_group_size=8))
    set_field(md, [3], 10**8)
    set_field(row_group(md, 0), [3], 10**8)
    lying = join_file(body, md)
    assert len(lying) < 4096
    _put(tmp_path / 'rows', lying)
    with pytest.raises(ParquetError, match=r'train-00000-of-00001.parquet: row group 0 states 100,000,000 rows'):
        ParquetSource(tmp_path / 'rows', 'train')
    with pytest.raises(ParquetError, match='ROWS_PER_BYTE'):
        write_parquet_index(tmp_path / 'rows')
    # the same row group listed 2,000 times, each stating 8 rows a byte of its columns: the file's data bounds them all
    body, md = split_file(_file(tmp_path / 'ok2', [(_jpeg(i), i % 3) for i in range(100)], row_group_size=100))
    rg, held = row_group(md, 0), sum(dict((e[0], e[2]) for e in column_meta(md, 0, c))[7] for c in range(3))
    set_field(rg, [3], 8 * held)
    set_field(md, [4], (12, [rg] * 2000))
    set_field(md, [3], 8 * held * 2000)
    _put(tmp_path / 'many', join_file(body, md))
    with pytest.raises(ParquetError, match='at most 8 rows a byte'):
        ParquetSource(tmp_path / 'many', 'train')


def test_decoded_sizes_bounded_by_the_footer(tmp_path):
    "A zstd file of a few KB whose footer states 1,000 bytes for its image column, its pages 16 MiB: a row read without the index is refused before pyarrow decompresses a page."
    data = _file(tmp_path / 'ok', [(bytes(4 << 20), k % 3) for k in range(4)], row_group_size=4, compression='zstd')
    assert len(data) < 64 << 10
    body, md = split_file(data)
    set_field(column_meta(md, 0, 0), [6], 1000)  # image.bytes: total_uncompressed_size
    _put(tmp_path / 'bomb', join_file(body, md))
    src = ParquetSource(tmp_path / 'bomb', 'train', use_index=False)
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    with pytest.raises(ParquetError, match=r'row group 0 column image.bytes: its pages state over 1,000 bytes'):
        src.by_position().read(0, 0)
    assert pool.bytes_allocated() - before < 1 << 20
    with pytest.raises(ParquetError, match='over 1,000 bytes'):
        list(src.iter_shard(src.shards[0]))
    # pages that state fewer values than the footer: pyarrow would read past the chunk for the rest
    body, md = split_file(data)
    set_field(column_meta(md, 0, 0), [5], 40)
    _put(tmp_path / 'values', join_file(body, md))
    src = ParquetSource(tmp_path / 'values', 'train', use_index=False)
    with pytest.raises(ParquetError, match='its pages hold 4 values; the footer states 40'):
        src.by_position().read(0, 0)
    # the honest file reads: the same bytes pyarrow decodes
    _put(tmp_path / 'honest', data)
    src = ParquetSource(tmp_path / 'honest', 'train', use_index=False)
    assert src.by_position().read(0, 3)[1:] == (bytes(4 << 20), 0)


def _rewrite_header(data: bytes, pos: int, change) -> bytes:
    "`data` with the page header at `pos` read, changed by `change(header)` and written back; the footer's offsets past it and its chunk's size moved to match."
    h, end = read_struct(data, pos)
    change(h)
    new = write_struct(h)
    shift = len(new) - (end - pos)
    body, md = split_file(data[:pos] + new + data[end:])
    for g in range(len(next(e for e in md if e[0] == 4)[2][1])):
        for c in range(len(next(e for e in row_group(md, g) if e[0] == 1)[2][1])):
            cm = {e[0]: e for e in column_meta(md, g, c)}
            start = (cm.get(11) or cm[9])[2]
            if start <= pos < start + cm[7][2]:
                cm[7][2] += shift
            for k in (9, 10, 11):
                if k in cm and cm[k][2] > pos:
                    cm[k][2] += shift
    return join_file(body, md)


@pytest.mark.parametrize(
    'change, says',
    [
        (lambda h: set_field(h, [5], 7, 5), 'not a structure'),  # the data page's header an integer
        (lambda h: set_field(h, [1], (5, [0]), 9), 'no page header'),  # its type a list
        (lambda h: set_field(h, [5, 1], b'x', 8), 'num_values'),  # its values a binary
        (lambda h: set_field(h, [5, 1], 2**40), 'more than the 8 rows'),  # 2^40 values in a small page
    ],
)
def test_malformed_page_headers_named(tmp_path, change, says):
    "A page header with a field of the wrong type or a count its bytes cannot hold: `timmdata index` and a read by position raise ParquetError, never AttributeError, TypeError or MemoryError."
    samples = [(_jpeg(i), i % 3) for i in range(8)]
    good = _file(tmp_path / 'ok', samples, row_group_size=8, compression='snappy')
    _put(tmp_path / 'idx', good)
    write_parquet_index(tmp_path / 'idx')
    src, bad = ParquetSource(tmp_path / 'idx', 'train'), _rewrite_header(good, page_offsets(good)[0], change)
    assert src.by_position().read(0, 1)[1] == samples[1][0]
    (tmp_path / 'idx' / 'data' / NAME).write_bytes(bad)  # the index written for the good file, read over the bad one
    with pytest.raises(ShardError):
        src.by_position().read(0, 1)
    _put(tmp_path / 'bad', bad)
    with pytest.raises(ParquetError, match=says):
        write_parquet_index(tmp_path / 'bad')


def test_dictionary_index_of_70_bits(tmp_path):
    "A dictionary-encoded page whose indices state 70 bits each (a run of one 9-byte value): ParquetError, once an OverflowError."
    samples = [(_jpeg(i), i % 3) for i in range(64)]
    data = bytearray(_file(tmp_path / 'ok', samples, row_group_size=64, use_dictionary=True))
    _, data_page = page_offsets(bytes(data))[:2]  # the dictionary page, then the data page
    h, end = read_struct(bytes(data), data_page)
    at = end + 4 + int.from_bytes(data[end : end + 4], 'little')  # v1: the definition levels' length and bytes first
    data[at : at + 11] = bytes([70, 2]) + b'\xff' * 9  # the indices' bit width, then a run of one value
    _put(tmp_path / 'bad', bytes(data))
    with pytest.raises(ParquetError, match='at most 32 bits'):
        write_parquet_index(tmp_path / 'bad')


def test_schema_without_the_image_leaf(tmp_path):
    "A footer whose Parquet schema names the image's bytes otherwise than its Arrow schema: ParquetError at open (once a TypeError)."
    body, md = split_file(_file(tmp_path / 'ok', [(_jpeg(i), i % 3) for i in range(4)], row_group_size=4))
    for element in next(e for e in md if e[0] == 2)[2][1]:  # the schema's elements: field 4 is a name
        for f in element:
            if f[0] == 4 and f[2] == b'bytes':
                f[2] = b'bytez'
    _put(tmp_path / 'leaf', join_file(body, md))
    with pytest.raises(ParquetError, match="no column 'image.bytes'"):
        ParquetSource(tmp_path / 'leaf', 'train')


def test_column_metadata_pyarrow_would_abort_on(tmp_path):
    "A column chunk whose size statistics do not fit its column: pyarrow's metadata accessors end the process (std::terminate) on it; the footer is refused with a ParquetError first."
    body, md = split_file(_file(tmp_path / 'ok', [(_jpeg(i), i % 3) for i in range(4)], row_group_size=4))
    set_field(column_meta(md, 0, 2), [16], [[3, 9, (6, [0] * 5)]], 12)  # the label's SizeStatistics: 5 levels, not 1
    _put(tmp_path / 'sizes', join_file(body, md))
    with pytest.raises(ParquetError, match='histogram'):
        ParquetSource(tmp_path / 'sizes', 'train', use_index=False)
    with pytest.raises(ParquetError, match='histogram'):
        write_parquet_index(tmp_path / 'sizes')
    # pyarrow's check reads nothing: a chunk stating a TiB is never allocated, and is named where it is read
    body, md = split_file(_file(tmp_path / 'ok', [(_jpeg(i), i % 3) for i in range(4)], row_group_size=4))
    set_field(column_meta(md, 0, 2), [7], 2**40)  # the label's chunk: 1 TiB stored
    _put(tmp_path / 'tib', join_file(body, md))
    src = ParquetSource(tmp_path / 'tib', 'train', use_index=False)
    with pytest.raises(ParquetError, match='column label: a column chunk at byte'):
        src.by_position().read(0, 0)


VARIANTS = [
    dict(compression='snappy'),
    dict(compression='zstd', data_page_version='2.0'),
    dict(compression='none', use_dictionary=True),
    dict(compression='gzip', use_dictionary=True, data_page_version='2.0'),
    dict(compression='none'),
]


def _outcome(step) -> str:
    "'read' or the name of the error `step()` raised: a ShardError naming the file, or the refused choice of columns."
    try:
        step()
        return 'read'
    except ShardError as e:  # ParquetError, or ShardChangedError where the rows no longer match
        assert 'parquet' in str(e).lower(), e  # names the file
        return type(e).__name__
    except ValueError as e:  # damage that leaves no image column: a choice of columns refused, not pyarrow's error
        assert type(e) is ValueError and 'image' in str(e), repr(e)
        return 'ValueError'


def _every_row(folder, use_index):
    s = ParquetSource(folder, 'train', use_index=use_index)
    r = s.by_position()
    return [r.read(0, m) for m in range(s.shard_lengths[0])]


def _walk(folder):
    "What `timmdata index` reads of the image column, through this module's calls: the footer checked, every row group's pages walked."
    data = (folder / 'data' / NAME).read_bytes()
    read_at, where = lambda o, n: data[o : o + n], 'Parquet file f'
    footer = footer_bytes(read_at, len(data), where)
    md = parse_footer(footer, where)
    leaf = find_columns(md, None, None, where)['leaf']
    check_footer(md, len(data), len(footer), leaf, where)
    desc = md.schema.column(leaf)
    for g in range(md.num_row_groups):
        ch = md.row_group(g).column(leaf)
        codec = CODECS.index(ch.compression) if ch.compression in CODECS else -1
        start = (
            ch.dictionary_page_offset if ch.has_dictionary_page and ch.dictionary_page_offset else ch.data_page_offset
        )
        rows = md.row_group(g).num_rows
        levels = desc.max_definition_level, desc.max_repetition_level
        chunk_rows(read_at, start, ch.total_compressed_size, rows, codec, *levels, f'{where} row group {g}')


def _attempt(folder, index: bool = True) -> str:
    "Each way in, on its own: open and read every row without the index; walk the image column's pages; with `index`, write the index and read every row with it."
    got = [_outcome(lambda: _every_row(folder, False)), _outcome(lambda: _walk(folder))]
    if index:
        got.append(_outcome(lambda: write_parquet_index(folder)))
        if got[-1] == 'read':
            got.append(_outcome(lambda: _every_row(folder, True)))
    return 'read' if set(got) == {'read'} else next(g for g in got if g != 'read')


PALETTE = [  # (type, value) a field is given: integers at the edges, binaries, lists, structs, booleans, maps
    (5, -1),
    (5, 0),
    (6, 2**31),
    (6, 2**40),
    (8, b''),
    (8, b'xyz'),
    (9, (5, [0, 1])),
    (9, (1, [True] * 3)),
    (12, []),
    (12, [[1, 5, 7]]),
    (1, True),
    (2, False),
    (11, (1, 1, [(True, True)])),
]


def _typed(rng, good: bytes, heads: list) -> bytes:
    "A page header of `good` read, one of its fields (or its data page header's) given another type or an extreme value, written back."
    pos = rng.choice(heads)[0]

    def change(h):
        sub = [e for e in h if e[1] == 12 and e[2]]
        fields = rng.choice([h, sub[0][2]]) if sub else h
        fid = rng.choice([e[0] for e in fields] + [rng.randrange(1, 12)])
        t, v = rng.choice(PALETTE)
        set_field(fields, [fid], v, t)

    return _rewrite_header(good, pos, change)


def _lying_footer(rng, good: bytes) -> bytes:
    "`good` with a number of its footer (a row group's rows, or the values, sizes or first page's offset of its image column chunk) changed to an extreme."
    body, md = split_file(good)
    g, c = rng.randrange(3), 0  # the label column is read whole by pyarrow when the index is written: not this test's
    v = rng.choice([-1, 0, 1, 7, 10**3, 2**31, 10**8, 2**40])
    if rng.random() < 0.3:
        set_field(row_group(md, g), [3], v)  # its rows
    else:
        set_field(column_meta(md, g, c), [rng.choice([5, 6, 7, 9])], v)  # values, sizes, the first page's offset
    return join_file(body, md)


@pytest.mark.slow
def test_page_headers_and_footers_fuzzed(tmp_path):
    "Page headers of the image column changed at random, byte by byte and field by field (another type, an extreme value), and footers' numbers and bytes (a fixed seed, 400 files): each read or refused with a ShardError, each in bounded time."
    rng, seen = random.Random(5), {}
    goods = [
        _file(tmp_path / f'v{k}', [(_jpeg(i), i % 3) for i in range(12)], row_group_size=4, **kw)
        for k, kw in enumerate(VARIANTS)
    ]
    for k in range(400):
        good = goods[k % len(goods)]
        heads = [(p, read_struct(good, p)[1]) for g in range(3) for p in page_offsets(good, g)]
        how, b = k % 4, bytearray(good)
        if how == 0:  # a page header's bytes: its fields, before the statistics' bytes (the values' copies)
            a, e = rng.choice(heads)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(a, min(e, a + 24))] = rng.choice(
                    [0, 1, 2, 0x15, 0x19, 0x1B, 0x1C, 0xFF, rng.randrange(256)]
                )
        elif how == 1:
            b = _typed(rng, good, heads)
        elif how == 2:  # a byte of the footer's metadata
            n = int.from_bytes(good[-8:-4], 'little')
            for _ in range(rng.randint(1, 3)):
                b[len(b) - 8 - n + rng.randrange(n)] = rng.randrange(256)
        else:
            b = _lying_footer(rng, good)
        _put(tmp_path / 'f', bytes(b))
        t = time.perf_counter()
        out = _attempt(tmp_path / "f")  # the index writer too: its own pyarrow reads of a lying footer named
        assert time.perf_counter() - t < 5, k
        seen[out] = seen.get(out, 0) + 1
    assert seen.get('ParquetError', 0) > 200, seen


def test_sources_read_and_dropped_leave_no_file_open(tmp_path):
    "A source read and dropped closes its files: pyarrow keeps no exception of ours (and with it the frames of a reader holding open files), so twenty sources leave no descriptor behind."
    if not os.path.isdir('/proc/self/fd'):
        pytest.skip('counts descriptors through /proc/self/fd')
    write_sample_parquet(tmp_path / 'f', [(_jpeg(i), i % 3) for i in range(12)], ['a', 'b', 'c'], files=1, row_group_size=4)
    def once():
        s = ParquetSource(tmp_path / 'f', 'train', use_index=False)
        r = s.by_position()
        return len([r.read(0, m) for m in range(s.shard_lengths[0])])
    assert once() == 12
    before = len(os.listdir('/proc/self/fd'))
    for _ in range(20):
        assert once() == 12
    assert len(os.listdir('/proc/self/fd')) <= before + 1, 'open descriptors grew with each source read'
