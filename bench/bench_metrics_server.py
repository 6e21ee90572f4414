"""The threads a training process keeps while N connections to its Prometheus port each send half a request and stop:
prometheus_client's `start_http_server` (a thread per connection, no read timeout) against `PrometheusSink`'s own
server (at most 8 connections at once, a 5 s read timeout), in one run. Counts threads, not time.

    python bench/bench_metrics_server.py --connections 300
"""

import argparse, socket, threading, time

import prometheus_client

from timmdata.watch.loader_watch import PrometheusSink


def held(port: int, n: int, wait: float) -> tuple:
    "Extra threads 1 s after n half-sent requests, and `wait` s later."
    before = threading.active_count()
    socks = [socket.create_connection(('127.0.0.1', port)) for _ in range(n)]
    for s in socks:
        s.sendall(b'GET /metr')  # and nothing more
    time.sleep(1)
    during = threading.active_count() - before
    time.sleep(wait)
    after = threading.active_count() - before
    for s in socks:
        s.close()
    return during, after


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--connections', type=int, default=300)
    ap.add_argument('--wait', type=float, default=6.0, help='seconds after the first count (past the 5 s read timeout)')
    a = ap.parse_args()
    srv, _ = prometheus_client.start_http_server(0, addr='127.0.0.1', registry=prometheus_client.CollectorRegistry())
    theirs = held(srv.server_port, a.connections, a.wait)
    sink = PrometheusSink(0, rank=0)
    ours = held(sink.port, a.connections, a.wait)
    print(f'{a.connections} half-sent requests: extra threads after 1 s, after {1 + a.wait:g} s')
    print(f'  prometheus_client.start_http_server  +{theirs[0]}  +{theirs[1]}')
    print(
        f'  timmdata PrometheusSink              +{ours[0]}  +{ours[1]}  (listens on {sink.server.server_address[0]})'
    )
    print(f'  ratio after 1 s: {theirs[0] / max(ours[0], 1):.0f}x fewer threads')
