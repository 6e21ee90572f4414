#!/usr/bin/env bash
# Build CPython free-threaded (--disable-gil) from the source package python3.14 (Debian's, else Ubuntu's) into .ft/python.
# Usage: bash tools/ft_python.sh [interp|venv|all|test]   (make ft-python: all; make ft-test: test; .ft/ is ignored)
# FT_PY=3.14 (the default) tries python3.14 and, where no archive serves it, python3.13 (3.13t, the first release with
# a free-threaded build), saying so; FT_PY=3.13 asks for 3.13 only. .ft/python/VERSION says which was built. The source
# comes from Debian's unstable suite, else from Ubuntu's archive (see ubuntu_keyring below), through a private apt
# configuration under .ft/apt (one deb-src line at a time), so the machine's own apt configuration is left alone. The
# build dependencies are Debian packages of
# the running release, installed with apt-get (an explicit list: `apt-get build-dep` would ask for unstable's
# clang-21 and debhelper, which the build below does not use). The upstream tarball inside the source package is
# built as it is (Debian's patches move install paths to /usr layouts that a --prefix build does not want).
# No PGO or LTO: a plain ./configure --disable-gil && make, for build time on a small machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FT=$ROOT/.ft
PREFIX=$FT/python
VENV=$FT/venv
JOBS=${JOBS:-$(nproc)}
case ${FT_PY:-3.14} in 3.14) FT_VERSIONS="3.14 3.13" ;; *) FT_VERSIONS=$FT_PY ;; esac
stage=${1:-all}
mkdir -p "$FT"
stamp() { echo "$1 $(date +%s) $(date -u +%FT%TZ)" >> "$FT/times.txt"; }

# apt as this script runs it: a private configuration under .ft/apt that trusts only the keyring each source names
# (signed-by) and refuses a list past its Valid-Until. APT_CONFIG names a file apt reads first; it points
# Dir::Etc::Parts and Dir::Etc::main at empty places, so the machine's apt.conf.d is never read (an
# Acquire::Check-Valid-Until "false" there would let a mirror replay an older signed list, with its older packages),
# and Dir::Etc::Trusted and TrustedParts at empty ones, so no key of the machine's trusted.gpg(.d) signs for anything.
# Check-Valid-Until refuses only a list that carries a Valid-Until field; Ubuntu's carry none, so Max-ValidTime
# bounds every list's age from its own Date: a signed list older than FT_MAX_LIST_DAYS days (400: an Ubuntu release
# pocket's list is dated its release day, and a year and a month covers the current release) is refused, never
# replayed (with its older packages) by a mirror.
# `bash tools/ft_python.sh apt-config` prints the configuration (what tests/test_hostile_apt.py checks).
DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
apt_private() {
    mkdir -p "$FT/apt/lists/partial" "$FT/apt/cache/archives/partial" "$FT/apt/empty.d" "$FT/src"
    : > "$FT/apt/empty.conf"
    printf 'Dir::Etc::Parts "%s";\nDir::Etc::main "%s";\n' "$FT/apt/empty.d" "$FT/apt/empty.conf" > "$FT/apt/apt.conf"
    export APT_CONFIG=$FT/apt/apt.conf
    APTO=(-o "Dir::Etc::SourceList=$FT/apt/sources.list" -o "Dir::Etc::SourceParts=$FT/apt/empty.d"
          -o "Dir::State::Lists=$FT/apt/lists" -o "Dir::Cache=$FT/apt/cache"
          -o "Dir::Etc::Trusted=$FT/apt/empty.d/none.gpg" -o "Dir::Etc::TrustedParts=$FT/apt/empty.d"
          -o "Acquire::Check-Valid-Until=true" -o "Acquire::Max-ValidTime=$((${FT_MAX_LIST_DAYS:-400} * 86400))"
          -o "Acquire::AllowInsecureRepositories=false"
          -o "Acquire::AllowDowngradeToInsecureRepositories=false" -o "APT::Get::AllowUnauthenticated=false")
}

# Where the source package is looked for, in order: Debian's unstable suite (the package the build was planned on),
# then Ubuntu's development series and its current release, whose python3.14 source packages carry the same upstream
# tarball (Ubuntu's mirror serves some of the files that Debian's answers 404 for). Ubuntu's signing key comes from
# Debian's own ubuntu-keyring package, checked by Debian's key, so every file is checked against a signed list.
ubuntu_keyring() {
    local k=$FT/apt/ubuntu-keyring
    if [ ! -s "$k/ubuntu-archive-keyring.gpg" ]; then
        mkdir -p "$k/deb"
        echo "deb [signed-by=$DEBIAN_KEYRING] http://deb.debian.org/debian trixie main" > "$FT/apt/sources.list"
        rm -f "$FT/apt/lists/"*_* ; apt-get "${APTO[@]}" update -qq > "$FT/keyring.log" 2>&1
        (cd "$k/deb" && apt-get "${APTO[@]}" download ubuntu-keyring) >> "$FT/keyring.log" 2>&1 || { echo "ft-python: Debian's ubuntu-keyring package could not be downloaded: Ubuntu's archive not tried" >&2; return 1; }
        dpkg-deb -x "$k"/deb/ubuntu-keyring_*.deb "$k/x"
        cp "$k/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$k/"
    fi
    echo "$k/ubuntu-archive-keyring.gpg"
}

# The upstream tarball of source package python$1, version $2, into .ft/src, its SHA-256 checked against the signed
# list. Only the tarball is needed (Debian's patches are not applied), so a mirror that serves it but not the .dsc will do.
orig_source() {
    local v=$1 ver=$2 name sum
    read -r sum name < <(apt-cache "${APTO[@]}" showsrc "python$v" | awk -v ver="$ver" '
        /^Version: / {mine = ($2 == ver)} /^[A-Za-z0-9-]+:/ {sec = $1}
        mine && sec == "Checksums-Sha256:" && $3 ~ /\.orig\.tar\./ {print $1, $3; exit}')
    [ -n "${name:-}" ] || return 1
    (cd "$FT/src" && apt-get "${APTO[@]}" source --download-only "python$v=$ver") >> "$FT/source-$v.log" 2>&1 || true
    [ -f "$FT/src/$name" ] && echo "$sum  $FT/src/$name" | sha256sum -c --quiet - >> "$FT/source-$v.log" 2>&1 || { rm -f "$FT/src/$name"; return 1; }
    ORIG=$FT/src/$name
}

interp() {
    if [ -x "$PREFIX/bin/python3t" ]; then echo "ft-python: $PREFIX/bin/python3t exists ($(cat "$PREFIX/VERSION"))"; return; fi
    stamp interp-start
    DEPS="build-essential dpkg-dev pkg-config xz-utils libreadline-dev libncurses-dev zlib1g-dev libbz2-dev
          liblzma-dev libzstd-dev libgdbm-dev tk-dev libssl-dev libexpat1-dev libsqlite3-dev libffi-dev uuid-dev"
    missing=$(for p in $DEPS; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
        else echo "ft-python: install the build dependencies first: sudo apt-get install $missing" >&2; exit 1; fi
    fi
    apt_private
    ARCHIVES=("deb-src [signed-by=$DEBIAN_KEYRING] http://deb.debian.org/debian unstable main")
    local uk
    if uk=$(ubuntu_keyring); then
        ARCHIVES+=("deb-src [signed-by=$uk] http://archive.ubuntu.com/ubuntu devel main"
                   "deb-src [signed-by=$uk] http://archive.ubuntu.com/ubuntu resolute main")
    fi
    got=
    for v in $FT_VERSIONS; do
        for line in "${ARCHIVES[@]}"; do
            echo "$line" > "$FT/apt/sources.list"
            rm -f "$FT/apt/lists/"*_* ; apt-get "${APTO[@]}" update -qq >> "$FT/source-$v.log" 2>&1 || continue
            # every version the archive lists, newest first: a mirror may serve an older one only
            for ver in $(apt-cache "${APTO[@]}" showsrc "python$v" 2>/dev/null | sed -n 's/^Version: //p' | sort -rV); do
                if orig_source "$v" "$ver"; then got=$v; echo "ft-python: python$v $ver from ${line#deb-src }" >&2; break 3; fi
                echo "ft-python: python$v $ver could not be downloaded from ${line#deb-src } (see $FT/source-$v.log)" >&2
            done
        done
    done
    [ -n "$got" ] || { echo "ft-python: no source package of $FT_VERSIONS could be downloaded" >&2; exit 1; }
    [ "$got" = "${FT_VERSIONS%% *}" ] || echo "ft-python: building python$got (free-threaded) instead" >&2
    rm -rf "$FT/src/cpython" && mkdir -p "$FT/src/cpython"
    tar -xf "$ORIG" -C "$FT/src/cpython" --strip-components=1
    cd "$FT/src/cpython"
    ./configure --disable-gil --prefix="$PREFIX" --with-ensurepip=install > "$FT/configure.log" 2>&1
    make -j"$JOBS" > "$FT/make.log" 2>&1
    make install > "$FT/install.log" 2>&1
    cd "$ROOT"
    ln -sf "python${got}t" "$PREFIX/bin/python3t"
    echo "$got" > "$PREFIX/VERSION"
    stamp interp-end
    "$PREFIX/bin/python3t" -c "import sys, sysconfig; assert not sys._is_gil_enabled(); print(sys.version, sysconfig.get_config_var('Py_GIL_DISABLED'))"
}

venv() {
    stamp venv-start
    local v; v=$(cat "$PREFIX/VERSION")
    rm -rf "$VENV"
    "$PREFIX/bin/python3t" -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip)
    "${pip[@]}" install -q --upgrade pip
    # the free-threaded wheels (cp314t / cp313t); 3.14's torch is newer than this machine's pip cap (/etc/xdg/pip), lifted here only
    if [ "$v" = 3.14 ]; then
        PIP_CONSTRAINT=/dev/null "${pip[@]}" install -q "torch==2.15.*" "torchvision==0.29.2" "pillow==13.*" "numpy==2.4.*"
    else  # 3.13t: torch's last cp313t wheels are 2.12
        "${pip[@]}" install -q "torch==2.12.*" torchvision "pillow==13.*" "numpy==2.4.*"
    fi
    "${pip[@]}" install -q --prefer-binary -e .  # the newest matplotlib may have no free-threaded wheel yet
    # what the tests and the notebooks use; one group at a time: a group without free-threaded wheels is left out, and
    # said (nbdev with fastcore < 2, as the project pins it; PyYAML, which nbdev needs, has no cp313t wheel: its pure
    # Python build is used; the docs build's tools for tests/test_docs_browser.py, which skips where they are missing)
    : > "$FT/left-out.txt"
    for g in "pytest pytest-xdist" "nbdev==2.4.14 fastcore>=1.12.27,<2 execnb<0.2 ipykernel nbconvert" "webdataset>=1.0 fsspec psutil" \
             "mkdocs==1.6.1 mkdocs-material==9.8.1 websocket-client==1.9.2"; do
        # shellcheck disable=SC2086
        "${pip[@]}" install -q --prefer-binary $g > "$FT/pip-${g%%[ =<>]*}.log" 2>&1 || { echo "$g" >> "$FT/left-out.txt"; echo "ft-python: $g left out (see $FT/pip-${g%%[ =<>]*}.log)" >&2; }
    done
    # timm 1.x, without its safetensors and huggingface_hub (Rust extensions without free-threaded
    # wheels; timm imports them only where present): pip would otherwise take timm 0.6, the last without them
    "${pip[@]}" install -q --no-deps "timm>=1.0" || echo timm >> "$FT/left-out.txt"
    # triton (torch's GPU kernel compiler, a dependency of torch's Linux wheels) has no free-threaded build: torchvision's
    # import reaches torch._dynamo, which imports triton, whose extension turns the GIL back on for the whole process.
    # Loading data on the CPU does not use it: left out (tests/test_freethreaded.py names any module that re-enables it)
    "${pip[@]}" uninstall -q -y triton || true
    "$VENV/bin/python" -c "import sys, timmdata._native, torch, torchvision; assert not sys._is_gil_enabled(), 'the GIL is on after importing timmdata, torch, torchvision'; print('ft-python: timmdata._native, torch', torch.__version__, 'on', sys.version)"
    stamp venv-end
}

# tests/ on the free-threaded venv, then the notebooks where nbdev installed
ftest() {
    [ -x "$VENV/bin/python" ] || { echo "ft-test: run make ft-python first" >&2; exit 1; }
    stamp test-start
    PATH="$VENV/bin:$PATH" bash tools/scratch_tmp.sh "$VENV/bin/python" -m pytest -q -n 2 --dist loadfile --durations=10 tests
    stamp pytest-end
    if "$VENV/bin/python" -c "import nbdev, execnb" 2>/dev/null; then
        PATH="$VENV/bin:$PATH" bash tools/scratch_tmp.sh "$VENV/bin/python" tools/nbtest.py --n_workers 2
    else echo "ft-test: nbdev or execnb has no free-threaded install here: notebooks not run" >&2; fi
    stamp test-end
}

case $stage in
    interp) interp ;;
    venv) venv ;;
    all) interp; [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import timmdata._native" 2>/dev/null || venv ;;
    test) ftest ;;
    apt-config) apt_private; apt-config "${APTO[@]}" dump ;;
    *) echo "usage: tools/ft_python.sh [interp|venv|all|test|apt-config]" >&2; exit 2 ;;
esac
