"""tools/ft_python.sh (issue 71): the CPython source it builds from is checked against the keyring each source names
(`signed-by` on every line), never against whatever key the machine's trusted.gpg holds, and a list past its
Valid-Until is refused even where the machine's apt configuration says `Acquire::Check-Valid-Until "false"` (one that
lets a mirror replay an older signed list). Read from the script and from `apt-config dump` with its configuration:
nothing is downloaded or built."""

import re, shutil, subprocess
from pathlib import Path
import pytest

SCRIPT = Path(__file__).parents[1] / 'tools' / 'ft_python.sh'


def test_every_source_line_names_its_keyring():
    lines = [l for l in SCRIPT.read_text().splitlines() if re.search(r'["(]deb(-src)? ', l)]
    assert len(lines) >= 4, lines  # Debian's unstable deb-src, its trixie deb (for ubuntu-keyring), Ubuntu's two
    for l in lines:
        assert re.search(r'deb(-src)? \[signed-by=', l), (
            f'a source without signed-by (any key the machine trusts would do): {l.strip()}'
        )


@pytest.mark.skipif(shutil.which('apt-config') is None, reason='needs apt (Debian or Ubuntu)')
def test_apt_ignores_the_machines_keys_and_valid_until_overrides():
    out = subprocess.run(['bash', str(SCRIPT), 'apt-config'], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    conf = dict(re.findall(r'^(\S+) "(.*)";$', out.stdout, re.M))
    assert conf.get('Acquire::Check-Valid-Until') == 'true', conf.get('Acquire::Check-Valid-Until')
    # lists without a Valid-Until (Ubuntu's) are bounded by their own Date: an old signed list is not replayed
    assert 0 < int(conf.get('Acquire::Max-ValidTime', 0)) <= 400 * 86400, conf.get('Acquire::Max-ValidTime')
    for k in (
        'Acquire::AllowInsecureRepositories',
        'Acquire::AllowDowngradeToInsecureRepositories',
        'APT::Get::AllowUnauthenticated',
    ):
        assert conf.get(k) == 'false', (k, conf.get(k))
    ft = str(SCRIPT.parents[1] / '.ft')
    for k in (
        'Dir::Etc::trusted',
        'Dir::Etc::trustedparts',
        'Dir::Etc::parts',
        'Dir::Etc::main',
        'Dir::Etc::sourceparts',
    ):
        assert conf.get(k, '').startswith(ft), f"{k} is the machine's ({conf.get(k)!r}), not the script's own"
    assert not any(any(Path(conf[k]).iterdir()) for k in ("Dir::Etc::trustedparts", "Dir::Etc::parts")), (
        "empty: no key, no setting of the machine"
    )
