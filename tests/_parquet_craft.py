"""Hostile Parquet files made from valid ones (tests only): Thrift's compact protocol read into a typed tree that
keeps every field's type, changed, and written back, so a footer or a page header can state whatever a test needs
while the rest of the file stays as pyarrow wrote it. A struct is a list of [field id, type, value]; a list or set
is (element type, [values]); a map (key type, value type, [(key, value)])."""

STRUCT, LIST, SET, MAP, BINARY = 12, 9, 10, 11, 8


def _varint(n: int) -> bytes:
    out = b''
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _zz(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


class Reader:
    def __init__(self, buf, pos=0):
        self.buf, self.pos = buf, pos

    def byte(self):
        self.pos += 1
        return self.buf[self.pos - 1]

    def varint(self):
        out, shift = 0, 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return out

    def zigzag(self):
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t, in_container=False):
        if t in (1, 2):
            return (self.byte() == 1) if in_container else t == 1
        if t == 3:
            return self.byte()
        if t in (4, 5, 6):
            return self.zigzag()
        if t == 7:
            self.pos += 8
            return self.buf[self.pos - 8 : self.pos]
        if t == BINARY:
            n = self.varint()
            self.pos += n
            return bytes(self.buf[self.pos - n : self.pos])
        if t in (LIST, SET):
            h = self.byte()
            n, et = h >> 4, h & 15
            n = self.varint() if n == 15 else n
            return (et, [self.value(et, True) for _ in range(n)])
        if t == MAP:
            n = self.varint()
            kt, vt = divmod(self.byte(), 16) if n else (0, 0)
            return (kt, vt, [(self.value(kt, True), self.value(vt, True)) for _ in range(n)])
        if t == STRUCT:
            return self.struct()
        raise ValueError(f'type {t}')

    def struct(self):
        out, last = [], 0
        while True:
            h = self.byte()
            if h == 0:
                return out
            d, t = h >> 4, h & 15
            fid = last + d if d else self.zigzag()
            out.append([fid, t, self.value(t)])
            last = fid


def write_value(t, v, in_container=False) -> bytes:
    if t in (1, 2):
        return bytes([1 if v else 2]) if in_container else b''
    if t == 3:
        return bytes([v & 0xFF])
    if t in (4, 5, 6):
        return _zz(v)
    if t == 7:
        return bytes(v)
    if t == BINARY:
        return _varint(len(v)) + bytes(v)
    if t in (LIST, SET):
        et, vals = v
        head = bytes([len(vals) << 4 | et]) if len(vals) < 15 else bytes([0xF0 | et]) + _varint(len(vals))
        return head + b''.join(write_value(et, x, True) for x in vals)
    if t == MAP:
        kt, vt, items = v
        if not items:
            return b'\x00'
        return (
            _varint(len(items))
            + bytes([kt << 4 | vt])
            + b''.join(write_value(kt, a, True) + write_value(vt, b, True) for a, b in items)
        )
    if t == STRUCT:
        return write_struct(v)
    raise ValueError(f'type {t}')


def write_struct(fields) -> bytes:
    out, last = b'', 0
    for fid, t, v in fields:
        wt = (1 if v else 2) if t in (1, 2) else t
        out += bytes([(fid - last) << 4 | wt]) if 0 < fid - last <= 15 else bytes([wt]) + _zz(fid)
        out += write_value(t, v)
        last = fid
    return out + b'\x00'


def read_struct(buf, pos=0):
    "(typed struct, end) at `buf[pos:]`."
    r = Reader(buf, pos)
    return r.struct(), r.pos


def field(struct, *path):
    "The [id, type, value] entry at `path` (field ids; an int after a list's id indexes the list)."
    entry = None
    for k in path:
        if entry is not None and entry[1] in (LIST, SET):
            entry = [None, STRUCT, entry[2][1][k]]
            continue
        fields = struct if entry is None else entry[2]
        entry = next(e for e in fields if e[0] == k)
    return entry


def set_field(struct, path, value, t=None):
    "Set (or add, with its type `t`) the field at `path`."
    *up, last = path
    parent = struct if not up else field(struct, *up)[2]
    for e in parent:
        if e[0] == last:
            e[2] = value
            if t is not None:
                e[1] = t
            return
    parent.append([last, t, value])
    parent.sort(key=lambda e: e[0])


def split_file(data: bytes):
    "(body before the footer, the footer's typed FileMetaData) of a Parquet file's bytes."
    n = int.from_bytes(data[-8:-4], 'little')
    md, _ = read_struct(data[-8 - n : -8])
    return data[: -8 - n], md


def join_file(body: bytes, md) -> bytes:
    f = write_struct(md)
    return body + f + len(f).to_bytes(4, 'little') + b'PAR1'


# FileMetaData: 3 num_rows, 4 row_groups; RowGroup: 1 columns, 2 total_byte_size, 3 num_rows;
# ColumnChunk: 3 meta_data; ColumnMetaData: 4 codec, 5 num_values, 6 total_uncompressed_size, 7 total_compressed_size,
# 9 data_page_offset, 11 dictionary_page_offset
def _get(struct, fid):
    return next(e for e in struct if e[0] == fid)[2]


def row_group(md, g):
    "The typed RowGroup `g` of a FileMetaData."
    return _get(md, 4)[1][g]


def column_meta(md, g, c):
    "The typed ColumnMetaData of column `c` of row group `g` (a list: changing it changes `md`)."
    return _get(_get(row_group(md, g), 1)[1][c], 3)


def page_offsets(data: bytes, g=0, c=0):
    "Offsets of the pages of column chunk `c` of row group `g` (dictionary page first), from its header sizes."
    _, md = split_file(data)
    cm = column_meta(md, g, c)
    get = {e[0]: e[2] for e in cm}
    start = get.get(11) or get[9]
    end, pos, out = start + get[7], start, []
    while pos < end:
        h, body = read_struct(data, pos)
        out.append(pos)
        pos = body + {e[0]: e[2] for e in h}[3]
    return out
