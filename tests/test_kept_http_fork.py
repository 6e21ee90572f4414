"""Kept HTTP connections belong to one process. A DataLoader worker forked after the main process read a sample over
HTTP (`ds[0]` in a notebook) inherits the main thread's kept connection; several processes reading answers from one
socket got another request's bytes, with no error. Here: a loopback server with ranged GETs over files of distinct
random bytes, one read in the main process, then 400 reads in 4 fork-started workers (a torch DataLoader and a
multiprocessing pool), every sample's bytes compared with the file's, and no connection used by two processes."""
import http.server, multiprocessing, os, random, threading, urllib.parse
from collections import defaultdict

import pytest, torch

from timmdata.net.kept_http import kept_get

FILES = {f'/f{i}.bin': random.Random(i).randbytes(200_000 + 1000 * i) for i in range(3)}
READS = [(f'/f{i % 3}.bin', random.Random(i).randrange(190_000), random.Random(-i).randrange(1, 9000)) for i in range(400)]


class _Ranged(http.server.BaseHTTPRequestHandler):
    "Ranged GETs of FILES on kept connections; logs (client port, the `pid` of the query) of each request."

    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True  # the body not held back for the head's ACK
    log = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        data = FILES[u.path]
        _Ranged.log.append((self.client_address[1], urllib.parse.parse_qs(u.query).get('pid', ['?'])[0]))
        a, b = map(int, self.headers['Range'].split('=', 1)[1].split('-'))
        body = data[a : b + 1]
        self.send_response(206)
        self.send_header('Content-Range', f'bytes {a}-{a + len(body) - 1}/{len(data)}')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def base():
    _Ranged.log.clear()
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _Ranged)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    try:
        yield f'http://127.0.0.1:{srv.server_port}'
    finally:
        srv.shutdown()
        srv.server_close()


def _read(base: str, i: int) -> tuple:
    "(i, this process's id, the bytes of read i) through this thread's kept connection."
    path, a, n = READS[i]
    return i, os.getpid(), kept_get(f'{base}{path}?pid={os.getpid()}', a, n, timeout=2, deadline=4)[1]


class _Samples(torch.utils.data.Dataset):
    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(READS)

    def __getitem__(self, i):
        return _read(self.base, i)


def _check(got: list, parent: int):
    "Every read's bytes are the file's at its range, workers read them, and no connection served two processes."
    assert sorted(i for i, _, _ in got) == list(range(len(READS)))
    for i, pid, body in got:
        path, a, n = READS[i]
        assert body == FILES[path][a : a + n], f'read {i} ({path} bytes {a}-{a + n - 1}) in process {pid}: other bytes'
    assert parent not in {pid for _, pid, _ in got}
    pids = defaultdict(set)
    for port, pid in _Ranged.log:
        pids[port].add(pid)
    shared = {port: p for port, p in pids.items() if len(p) > 1}
    assert not shared, f'connections used by several processes (client port: pids): {shared}'


@pytest.mark.filterwarnings('ignore:This DataLoader will create')
def test_dataloader_workers_forked_after_a_read(base):
    "A read in the main process, then a DataLoader's 4 fork-started workers: each its own connections, every byte right; the main process's connection still its own after."
    parent = os.getpid()
    _, _, body = _read(base, 0)  # ds[0] in the main process: its thread keeps the connection
    assert body == FILES[READS[0][0]][READS[0][1] : READS[0][1] + READS[0][2]]
    ctx = multiprocessing.get_context('fork')
    dl = torch.utils.data.DataLoader(
        _Samples(base), batch_size=None, num_workers=4, multiprocessing_context=ctx, timeout=30
    )
    _check(list(dl), parent)
    port = _Ranged.log[0][0]
    _read(base, 1)  # the main process reads on, on the connection it kept
    assert _Ranged.log[-1] == (port, str(parent))


def _kept_here(q):
    "What this process holds of kept connections: (this thread's, every thread's)."
    from timmdata.net import kept_http

    q.put((len(getattr(kept_http._KEPT, 'conns', {})), len(getattr(kept_http, '_OPEN', ()))))


def test_a_forked_child_holds_none_of_the_parents_connections(base):
    "Right after a fork, before any read: the child holds no connection, the parent still its own."
    _read(base, 0)
    ctx = multiprocessing.get_context('fork')
    q = ctx.Queue()
    p = ctx.Process(target=_kept_here, args=(q,))
    p.start()
    got = q.get(timeout=30)
    p.join(30)
    assert got == (0, 0), f'a forked child holds (this thread, all threads) {got} of its parent\'s kept connections'
    _kept_here(q)
    assert min(q.get(timeout=30)) >= 1
    _read(base, 1)  # on the connection the parent kept
    assert [port for port, _ in _Ranged.log[-2:]] == [_Ranged.log[0][0]] * 2


def test_pool_workers_forked_after_a_read(base):
    "The same with a multiprocessing pool of 4 fork-started processes reading 100 ranges each."
    parent = os.getpid()
    _read(base, 0)
    with multiprocessing.get_context('fork').Pool(4) as pool:
        got = pool.starmap(_read, [(base, i) for i in range(len(READS))], chunksize=25)
    _check(got, parent)
