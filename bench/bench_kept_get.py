"""What one ranged read of an image's size costs the reading process over HTTP (`timmdata.net.kept_http`): CPU
seconds of this process per 53 KB read (the kernel's share of the transfer included), 3,000 reads at random offsets
of a 20 MB file served by `bench_parquet.py`'s sendfile server (a separate process on the same machine), three ways
in one run: `kept_get`, `http.client` on one kept connection, and a minimal client (the request written by hand, the
answer received into one buffer: what the kernel alone costs). Best of `--rounds`.

    python bench/bench_kept_get.py
"""
import argparse
import http.client
import random
import socket
import tempfile
import time
from pathlib import Path

import bench_parquet

from timmdata.net.kept_http import kept_get


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--reads', type=int, default=3000)
    ap.add_argument('--size', type=int, default=52_889, help='bytes a read (the average 500x375 JPEG of the sample data)')
    ap.add_argument('--rounds', type=int, default=3)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    (tmp / 'f.bin').write_bytes(random.Random(0).randbytes(20 << 20))
    base = bench_parquet.serve(tmp)
    url, port, n = base + '/f.bin', int(base.rsplit(':', 1)[1]), a.size
    offsets = [random.Random(i).randrange((20 << 20) - n) for i in range(a.reads)]
    kept = http.client.HTTPConnection('127.0.0.1', port)
    sock = socket.create_connection(('127.0.0.1', port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(n + 4096)

    def by_http_client(o):
        kept.request('GET', '/f.bin', headers={'Range': f'bytes={o}-{o + n - 1}'})
        return kept.getresponse().read()

    def minimal(o):
        sock.sendall(b'GET /f.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=%d-%d\r\n\r\n' % (o, o + n - 1))
        at, view = 0, memoryview(buf)
        while (cut := buf.find(b'\r\n\r\n', 0, at)) < 0:
            at += sock.recv_into(view[at:])
        while at < cut + 4 + n:
            at += sock.recv_into(view[at : cut + 4 + n])
        return bytes(view[cut + 4 : cut + 4 + n])

    ways = {'kept_get': lambda o: kept_get(url, o, n)[1], 'http.client, kept': by_http_client, 'minimal client': minimal}
    data = (tmp / 'f.bin').read_bytes()
    for name, read in ways.items():
        assert all(read(o) == data[o : o + n] for o in offsets[:50]), name  # the bytes asked (and warm)
    best = {name: float('inf') for name in ways}
    for _ in range(a.rounds):
        for name, read in ways.items():  # alternating: drift hits each alike
            t0 = time.process_time()
            for o in offsets:
                read(o)
            best[name] = min(best[name], (time.process_time() - t0) / len(offsets))
    print(f'{a.reads:,} ranged reads of {n:,} bytes on loopback, CPU of this process a read (best of {a.rounds}):')
    for name, s in best.items():
        print(f'  {name:<20} {s * 1e6:6.1f} us   {s / best["minimal client"]:.2f}x the minimal client')


if __name__ == '__main__':
    main()
