"""Run as a script by tests/test_start_methods.py: `python tests/_env_workers.py ROOT` prints one JSON line, the
targets EnvTargetDataset's samples got in create_loader's worker processes, started by forkserver from a server that
began before the settings below were made (as a server does when a program configures a bucket after its first
loader)."""
import json, os, sys
from multiprocessing import forkserver
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

if __name__ == '__main__':
    from _datasets import EnvTargetDataset
    from timmdata import create_loader
    from timmdata.core.runtime import fork_unsafe

    os.environ.pop('WDS_SHUFFLE_SIZE', None)
    os.environ.pop('AZURE_STORAGE_USE_EMULATOR', None)
    os.environ['AZURE_STORAGE_ACCOUNT_NAME'] = 'gone'  # set in the server's environment, unset below
    forkserver.ensure_running()  # the server starts now, with this environment
    fork_unsafe('a test')  # create_loader starts its workers by forkserver
    os.environ['WDS_SHUFFLE_SIZE'] = '7'
    os.environ['AZURE_STORAGE_USE_EMULATOR'] = 'true'
    del os.environ['AZURE_STORAGE_ACCOUNT_NAME']
    dl = create_loader(EnvTargetDataset(sys.argv[1], split='train'), 32, 4, num_workers=2, device='cpu')
    ys = sorted(set(int(t) for _, y in dl for t in y))
    method = dl.loader.multiprocessing_context.get_start_method() if dl.loader.multiprocessing_context else None
    print(json.dumps({'targets': ys, 'method': method}))
