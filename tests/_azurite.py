"""Azurite, Microsoft's Azure Storage emulator (Node.js), as a local Blob service for the az:// tests: found where
`make test-deps` installs it (.venv/azurite) or on PATH, started on a free port with its data in memory, a container
made, and torn down after. Its account is the emulator's documented development account."""
import base64, datetime, hashlib, hmac, shutil, subprocess, urllib.request
from pathlib import Path
from _helpers import LocalService, free_port

ACCOUNT = 'devstoreaccount1'  # the emulator's development account and key, as Microsoft's documentation gives them
KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
ROOT = Path(__file__).resolve().parent.parent


def azurite_command():
    "The azurite-blob program, or None where it is not installed."
    local = ROOT / '.venv' / 'azurite' / 'node_modules' / '.bin' / 'azurite-blob'
    if local.exists() and shutil.which('node'):
        return str(local)
    return shutil.which('azurite-blob')


def _signed(method: str, url: str, path: str, query: dict) -> urllib.request.Request:
    "A Shared Key request (the Blob service's own signing) for the emulator's account."
    date = datetime.datetime.now(datetime.timezone.utc).strftime('%a, %d %b %Y %H:%M:%S GMT')
    headers = {'x-ms-date': date, 'x-ms-version': '2021-08-06'}
    canon_headers = ''.join(f'{k}:{v}\n' for k, v in sorted(headers.items()))
    canon_resource = f'/{ACCOUNT}{path}' + ''.join(f'\n{k}:{v}' for k, v in sorted(query.items()))
    ctype = 'application/octet-stream'
    # the verb, then the 11 standard headers (all empty but Content-Type), then x-ms-* and the resource
    to_sign = f'{method}\n\n\n\n\n{ctype}\n' + '\n' * 6 + canon_headers + canon_resource
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    q = '&'.join(f'{k}={v}' for k, v in query.items())
    req = urllib.request.Request(f'{url}{path}?{q}', method=method, data=b'' if method == 'PUT' else None,
                                 headers={**headers, 'Content-Type': ctype, 'Authorization': f'SharedKey {ACCOUNT}:{sig}'})
    return req


class Azurite(LocalService):
    "A running emulator with container `container`; `url(key)` names a blob as timmdata reads it (az://CONTAINER/KEY)."
    def __init__(self, container: str = 'data'):
        cmd = azurite_command()
        if cmd is None:
            raise FileNotFoundError('azurite-blob is not installed (make test-deps installs it where npm is)')
        self.port, self.container = free_port(), container
        self.proc = subprocess.Popen([cmd, '--inMemoryPersistence', '--blobHost', '127.0.0.1', '--blobPort',
                                      str(self.port), '--skipApiVersionCheck', '--silent'],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.endpoint = f'http://127.0.0.1:{self.port}/{ACCOUNT}'
        self.wait_until(lambda: urllib.request.urlopen(self._create(), timeout=5), 'azurite')

    def _create(self):
        return _signed('PUT', f'http://127.0.0.1:{self.port}', f'/{ACCOUNT}/{self.container}', {'restype': 'container'})

    def environment(self) -> dict:
        "The variables that point the Azure client at this emulator (its account, key and address)."
        return {'AZURE_STORAGE_ACCOUNT_NAME': ACCOUNT, 'AZURE_STORAGE_ACCOUNT_KEY': KEY,
                'AZURE_STORAGE_USE_EMULATOR': 'true', 'AZURITE_BLOB_STORAGE_URL': f'http://127.0.0.1:{self.port}'}

    def url(self, key: str = '') -> str:
        return f'az://{self.container}/{key}'.rstrip('/')

