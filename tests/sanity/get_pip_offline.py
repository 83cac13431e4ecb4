# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test bootstraps pip in the virtual environments of its sanity tests with a
get-pip script from a host this machine cannot reach; its error message says the script
may be placed in ~/.ansible/test/cache/ by hand. This stand-in does the same job with
what Python ships: ensurepip installs the bundled pip, which then installs the pip
version ansible-test asks for (from PyPI). `make sanity` copies it into that cache.
"""

import ensurepip
import os
import subprocess
import sys

# get-pip's own options; the rest are pip install arguments.
GET_PIP_OPTIONS = {"--no-setuptools", "--no-wheel"}
pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_OPTIONS]

# ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the pip runs below must
# read the machine's pip configuration (index, certificates) like any other pip.
pip_env = dict(os.environ)
ensurepip.bootstrap(upgrade=True)
pip = [sys.executable, "-m", "pip"]
subprocess.check_call([*pip, "install", *pip_args], env=pip_env)
if "--no-setuptools" in sys.argv[1:]:
    # ensurepip brings setuptools along on Python 3.11; get-pip would not have.
    subprocess.check_call([*pip, "uninstall", "--yes", "setuptools"], env=pip_env)
