#!/usr/bin/env bash
# Runs tests/lab/python_lab.py in the NUMA lab: the VM is a busybox initramfs without Python,
# so this copies in the interpreter and exactly the files the test imports -- the standard
# library modules and extension modules it loads on the host, listed by the script itself
# (--list-files), the numarena package and libnumarena.so -- each at its host path (run.sh's
# --file, which also copies the libraries ldd lists). Nothing is installed in the VM image.
#
#   python_lab.sh RUN_SH TOPOLOGY TIMEOUT PYTHON LIBNUMARENA PACKAGE_DIR
set -euo pipefail
run_sh="$1" topology="$2" timeout="$3" python="$4" library="$5" package_dir="$6"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script="$here/python_lab.py"

# The interpreter itself, not a wrapper (a pyenv shim is a shell script).
interpreter="$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
library="$(realpath "$library")" package_dir="$(realpath "$package_dir")"
files=()
while IFS= read -r f; do files+=(--file "$f"); done < <(
  NUMARENA_LIBRARY="$library" PYTHONDONTWRITEBYTECODE=1 \
    "$interpreter" -S "$script" "$package_dir" --list-files)
((${#files[@]} > 10)) || { echo "python_lab.sh: listing the imported files failed" >&2; exit 2; }

exec "$run_sh" --topology "$topology" --timeout "$timeout" "${files[@]}" --file "$library" \
  --env NUMARENA_LIBRARY="$library" --env PYTHONDONTWRITEBYTECODE=1 \
  -- "$interpreter" -S "$script" "$package_dir"
