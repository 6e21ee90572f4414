"""Packaging for timmdata: every setting comes from settings.ini, the one file nbdev also reads."""
from configparser import ConfigParser
import shlex
from setuptools import setup, find_packages, Extension

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

def split_reqs(key):
    # shlex keeps quoted requirements with spaces together; plain ones are space-separated
    return shlex.split(cfg.get(key, ''))

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
lic = licenses.get(cfg.get('license', 'apache2'))
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = ['3.9', '3.10', '3.11', '3.12', '3.13']
min_python = cfg['min_python']

# csrc/native.c: crop-aware JPEG decoding against the system libjpeg-turbo (nbs/02_decode.ipynb) and the fused
# uint8-to-normalised-float batch step (nbs/12_prefetch.ipynb). Optional: without a compiler or jpeglib.h the build
# goes on, and timmdata decodes whole images and normalises with torch ops instead (slower, same results).
native_ext = Extension('timmdata._native', ['csrc/native.c'], libraries=['jpeg'], extra_compile_args=['-O3'], optional=True)

setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    author=cfg['author'],
    author_email=cfg['author_email'],
    url=cfg['git_url'],
    license=lic[0],
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'License :: ' + lic[1],
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + v for v in py_versions[py_versions.index(min_python):]],
    keywords=cfg['keywords'],
    packages=find_packages(include=[cfg['lib_path'], cfg['lib_path'] + '.*']),
    include_package_data=True,
    python_requires='>=' + min_python,
    install_requires=split_reqs('requirements'),
    extras_require={'dev': split_reqs('dev_requirements')},
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
    ext_modules=[native_ext],
    zip_safe=False,
)
