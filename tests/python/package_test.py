"""The numarena Python package as a package: its version and its type stubs.

    package_test.py PROJECT_VERSION ALLOWLIST

Run with PYTHONPATH at the source tree's python/ and NUMARENA_LIBRARY at libnumarena.so.
numarena.__version__ must be the project's version (CMakeLists.txt) and what the library
says; py.typed must mark the package as typed; and mypy's stubtest (Debian's python3-mypy)
must find __init__.pyi true to the module: every public name, signature, default and
property, so the stubs cannot drift from the code. (The installed distribution metadata,
importlib.metadata.version("numarena"), is checked by tests/install_consumer/run.sh.)
"""
import os
import subprocess
import sys

import numarena

version, allowlist = sys.argv[1], os.path.abspath(sys.argv[2])
failures = []
if numarena.__version__ != version:
    failures.append(f"numarena.__version__ is {numarena.__version__!r}, the project {version!r}")
if numarena.version() != version:
    failures.append(f"the library says {numarena.version()!r}, the project {version!r}")
package = os.path.dirname(numarena.__file__)
for name in ("py.typed", "__init__.pyi"):
    if not os.path.isfile(os.path.join(package, name)):
        failures.append(f"no {name} in {package}")
stubtest = subprocess.run(
    [sys.executable, "-m", "mypy.stubtest", "numarena", "--allowlist", allowlist],
    capture_output=True, text=True, timeout=300, cwd=os.path.dirname(package))
if stubtest.returncode != 0:
    failures.append("stubtest:\n" + stubtest.stdout[-4000:] + stubtest.stderr[-2000:])
if failures:
    print("\n".join("FAILED: " + f for f in failures))
    sys.exit(1)
print(f"numarena {version}: __version__, py.typed, stubs checked by stubtest")
