"""Packaging for timmdata: every setting comes from settings.ini, the one file nbdev also reads."""
from configparser import ConfigParser
import shlex
import os, re, sys, tempfile
from setuptools import setup, find_packages, Extension
from setuptools.command.build_ext import build_ext

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

def split_reqs(key):
    # shlex keeps quoted requirements with spaces together; plain ones are space-separated
    return shlex.split(cfg.get(key, ''))

licenses = {'apache2': 'Apache-2.0'}  # SPDX expressions (setuptools >= 77; the License classifiers are deprecated)
lic = licenses.get(cfg.get('license', 'apache2'))
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = ['3.9', '3.10', '3.11', '3.12', '3.13']
min_python = cfg['min_python']

# csrc/native.c: crop-aware JPEG decoding against the system libjpeg-turbo (nbs/06_decode.ipynb) and the fused
# uint8-to-normalised-float batch step (nbs/31_prefetch.ipynb). Optional: without a compiler or jpeglib.h the build
# goes on, and timmdata decodes whole images and normalises with torch ops instead (slower, same results).
native_ext = Extension('timmdata._native', ['csrc/native.c'], libraries=['jpeg'],
                       extra_compile_args=['/O2'] if sys.platform == 'win32' else ['-O3'], optional=True)
BUILD_NOTE = '_native_build.txt'  # beside the extension, only when its build failed: timmdata.pixels.decode.NATIVE_STATUS reads it

def _why(log: str, err: Exception) -> str:
    "One line saying why the compiler failed: a missing header named as such, else the compiler's first error."
    if re.search(r'jpeglib\.h', log) and re.search(r'No such file|not found|cannot open', log, re.I):
        return 'missing jpeglib.h (install the libjpeg-turbo headers: Debian/Ubuntu libjpeg-dev, Fedora libjpeg-turbo-devel, macOS brew install jpeg-turbo)'
    lines = [l.strip() for l in log.splitlines() if re.search(r'\berror\b', l, re.I)]
    return 'compiler failed: ' + (lines[0] if lines else f'{type(err).__name__}: {err}')[:300]

class BuildExtNoted(build_ext):
    "build_ext that writes why the optional extension did not build into the package (the build itself goes on)."
    def run(self):
        self.note_inplace = self.inplace  # setuptools builds in build/ and copies in place afterwards: note both places
        super().run()

    def notes(self, ext) -> list:
        pkg = ext.name.rsplit('.', 1)[0]
        dirs = {os.path.dirname(self.get_ext_fullpath(ext.name))}
        if getattr(self, 'note_inplace', False): dirs.add(self.get_finalized_command('build_py').get_package_dir(pkg))
        return [os.path.join(d, BUILD_NOTE) for d in dirs]

    def build_extension(self, ext):
        # the compiler's messages go to fds 1 and 2: capture them (and show them afterwards) to name the cause
        with tempfile.TemporaryFile() as log:
            sys.stdout.flush(); sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1); os.dup2(log.fileno(), 2)
            try: super().build_extension(ext); err = None
            except Exception as e: err = e
            finally:
                sys.stdout.flush(); sys.stderr.flush()
                os.dup2(saved[0], 1); os.dup2(saved[1], 2); os.close(saved[0]); os.close(saved[1])
            log.seek(0); text = log.read().decode(errors='replace')
        sys.stderr.write(text)
        for note in self.notes(ext):
            if err is None:
                if os.path.exists(note): os.remove(note)
                continue
            os.makedirs(os.path.dirname(note), exist_ok=True)
            with open(note, 'w', encoding='utf-8') as f: f.write(_why(text, err) + '\n')
        if err is None: return
        sys.stderr.write(f'timmdata: the C extension was not built: {_why(text, err)}; timmdata works without it, more slowly '
                         f'(`timmdata info` says how to get the fast path)\n')
        raise err  # setuptools reports it and goes on without the optional extension

# the optional features, an extra each (pip install 'timmdata[parquet]'); [all] installs every one of them
FEATURES = {
    'wds': ['webdataset>=1.0'],  # WebDataset shards
    'hf': ['datasets>=3'],  # Hugging Face datasets
    'remote': ['fsspec'],  # remote storage through fsspec (s3://, gs://...)
    'cloud': ['obstore>=0.12'],  # S3, GCS and Azure read by position (timmdata.net.object_store)
    'codec': ['torchcodec>=0.16'],  # TorchCodec decoding: CMYK JPEGs, the GPU decode path
    # nvImageCodec's GPU decoding: Linux only (its marker); the wheel installs on a machine without a GPU too
    'nvimgcodec': ['nvidia-nvimgcodec-cu13[nvjpeg]>=0.9; sys_platform == "linux"'],
    'parquet': split_reqs('parquet_requirements'),  # Parquet files
    'lightning': split_reqs('lightning_requirements'), 'accelerate': split_reqs('accelerate_requirements'),
    'tensorboard': split_reqs('tensorboard_requirements'), 'prometheus': split_reqs('prometheus_requirements'),
}

setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    # README.md links its pictures by relative path (nbs/images/...); PyPI shows only absolute ones
    long_description=re.sub(r'(!\[[^\]]*\]\()nbs/', r'\g<1>' + cfg['git_url'].replace('github.com', 'raw.githubusercontent.com')
                            + '/' + cfg.get('branch', 'main') + '/nbs/', open('README.md', encoding='utf-8').read()),
    long_description_content_type='text/markdown',
    author=cfg['author'],
    author_email=cfg['author_email'],
    url=cfg['git_url'],
    license_expression=lic,
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + v for v in py_versions[py_versions.index(min_python):]],
    keywords=cfg['keywords'],
    packages=find_packages(include=[cfg['lib_path'], cfg['lib_path'] + '.*']),
    # the package's folder mapped explicitly: `pip install -e .` then puts the clone on sys.path (a .pth line) instead of
    # an import hook that runs after Python's own search, so a script beside the clone (`~/train.py` with the clone at
    # `~/timmdata`, a folder without __init__.py) imports the package, not the clone as an empty namespace package
    package_dir={'': '.'},
    include_package_data=True,
    python_requires='>=' + min_python,
    install_requires=split_reqs('requirements'),
    # dev: the tools to develop timmdata; all: every optional feature (FEATURES), none left out
    extras_require={'dev': split_reqs('dev_requirements'), **FEATURES, 'all': sorted({r for reqs in FEATURES.values() for r in reqs})},
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
    ext_modules=[native_ext],
    cmdclass={'build_ext': BuildExtNoted},
    zip_safe=False,
)
