# SPDX-License-Identifier: GPL-3.0-or-later
"""What every test under tests/ shares: secrets in directories that go when their fixture
ends (`secret_dir`, `secret_dirs`), and none left under tmp_path after a session, named in
the summary when one was (tests/unit/secret_files.py, on pytest's pythonpath)."""

pytest_plugins = ["secret_files"]
