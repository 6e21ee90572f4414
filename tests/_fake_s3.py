"""A fake S3 server in this process, for what a real one (moto's) will not do: ignore `If-Match`, answer a listing
with pages that never end or a continuation token of any size, send a `Last-Modified` in the year 99999, drip a body,
redirect to another host. Path-style requests (`/BUCKET/KEY`) on 127.0.0.1; each request's method, path and headers
logged. `with FakeS3() as s3:` points this process's S3 clients at it (as `LocalS3` does)."""
import email.utils, hashlib, http.server, threading, time, urllib.parse
from timmdata.core.settings import set_environment
from timmdata.net.object_store import close_clients

ENV = {'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing', 'AWS_REGION': 'us-east-1'}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *a):
        pass

    def _send(self, status: int, headers: dict, body: bytes = b'', pause: float = 0.0, chunk: int = 1 << 16):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if 'Content-Length' not in headers:
            self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command == 'HEAD':
            return
        try:
            for i in range(0, len(body), chunk):
                self.wfile.write(body[i : i + chunk])
                self.wfile.flush()
                if pause and self.server.s3.stop.wait(pause):
                    return
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _object(self, key: str):
        s3 = self.server.s3
        if key in s3.redirects:
            return self._send(307, {'Location': s3.redirects[key]})
        if key not in s3.objects:
            msg = b'<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>'
            return self._send(404, {'Content-Type': 'application/xml'}, msg)
        data = s3.objects[key]
        h = {'ETag': s3.etag(key), 'Last-Modified': s3.last_modified, 'Accept-Ranges': 'bytes'}
        rng = self.headers.get('Range')
        if rng and self.command == 'GET':
            a, b = rng.split('=', 1)[1].split('-')
            a, b = int(a), min(int(b), len(data) - 1)
            h['Content-Range'] = f'bytes {a}-{b}/{len(data)}'
            if s3.cut:  # the length of the range said, fewer bytes sent, the connection closed
                h['Content-Length'], self.close_connection = str(b + 1 - a), True
                return self._send(206, h, data[a : b + 1 - s3.cut], s3.pause, s3.chunk)
            return self._send(206, h, data[a : b + 1], s3.pause, s3.chunk)
        if self.command == 'HEAD':
            h['Content-Length'] = str(len(data))
        return self._send(200, h, data, s3.pause, s3.chunk)

    def _list(self, query: dict):
        s3 = self.server.s3
        s3.pages += 1
        keys, prefixes, token = s3.lister(query)
        items = ''.join(
            f'<Contents><Key>{k}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>'
            f'<ETag>&quot;{k}&quot;</ETag><Size>{n}</Size><StorageClass>STANDARD</StorageClass></Contents>'
            for k, n in keys
        )
        items += ''.join(f'<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>' for p in prefixes)
        more = f'<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>' if token else (
            '<IsTruncated>false</IsTruncated>'
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name>'
            f'<Prefix>{query.get("prefix", "")}</Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>'
            f'{more}{items}</ListBucketResult>'
        ).encode()
        if not s3.page_pad:
            return self._send(200, {'Content-Type': 'application/xml'}, body)
        # a page of page_pad more bytes (blanks before its end), made as it is sent: the server holds 1 MiB of it
        head, tail, part = body[: -len(b'</ListBucketResult>')], b'</ListBucketResult>', b' ' * (1 << 20)
        self._send(200, {'Content-Type': 'application/xml', 'Content-Length': str(len(body) + s3.page_pad)}, head)
        try:
            for _ in range(s3.page_pad >> 20):
                self.wfile.write(part)
                s3.page_sent += len(part)
            self.wfile.write(tail)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _any(self):
        s3 = self.server.s3
        s3.log.append((self.command, self.path, dict(self.headers.items())))
        path, _, q = self.path.partition('?')
        query = dict(urllib.parse.parse_qsl(q, keep_blank_values=True))
        parts = urllib.parse.unquote(path).lstrip('/').split('/', 1)
        if self.command == 'GET' and query.get('list-type') == '2':
            return self._list(query)
        if self.command in ('GET', 'HEAD') and len(parts) == 2:
            return self._object(parts[1])
        self._send(400, {}, b'')

    do_GET = do_HEAD = _any


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class FakeS3:
    """A fake S3 server: `objects` {key: bytes}; `etag(key)` the ETag it answers (a function: change it to replace an
    object; `If-Match` is ignored); `last_modified` the header's text; `lister(query)` -> (keys as (key, size), common
    prefixes, next continuation token or None) for each listing page; `pause` seconds between body chunks of `chunk`
    bytes; `cut` bytes left out of the end of each ranged answer's body (its headers say them); `redirects`
    {key: Location}; `log` each request's (method, path, headers); `pages` the listing pages sent; `page_pad` bytes of
    blanks (whole MiB) added to each listing page, `page_sent` how many of them were sent."""

    def __init__(self, bucket: str = 'fake'):
        self.bucket, self.objects, self.redirects, self.log, self.pages = bucket, {}, {}, [], 0
        self.etag = lambda key: '"' + hashlib.md5(self.objects[key]).hexdigest() + '"'
        self.last_modified = email.utils.formatdate(0, usegmt=True)
        self.lister = self._list_all
        self.pause, self.chunk, self.cut, self.stop = 0.0, 1 << 16, 0, threading.Event()
        self.page_pad = self.page_sent = 0

    def _list_all(self, query: dict):
        "One page of every object under the prefix (a listing's `delimiter` honoured)."
        pre, d = query.get('prefix', ''), query.get('delimiter')
        keys, prefixes = [], set()
        for k in sorted(self.objects):
            if not k.startswith(pre):
                continue
            rest = k[len(pre) :]
            if d and d in rest:
                prefixes.add(pre + rest.split(d, 1)[0] + d)
            else:
                keys.append((k, len(self.objects[k])))
        return keys, sorted(prefixes), None

    def url(self, key: str = '') -> str:
        return f's3://{self.bucket}/{key}'.rstrip('/')

    def __enter__(self):
        self._srv = _Server(('127.0.0.1', 0), _Handler)
        self._srv.s3 = self
        threading.Thread(target=self._srv.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
        self.endpoint = f'http://127.0.0.1:{self._srv.server_port}'
        self._old = set_environment({**ENV, 'AWS_ENDPOINT_URL': self.endpoint, 'AWS_ENDPOINT_URL_S3': None})
        close_clients()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self._srv.shutdown()
        self._srv.server_close()
        set_environment(self._old)
        close_clients()
