#!/usr/bin/env python3
"""The preload library's start-up functions sit side by side (cmake/preload_startup_order.ld,
written by tools/preload_startup_order.py).

    startup_order_test.py LIBNUMARENA_PRELOAD ORDER_FILE

- The library has the output section .text.numarena_startup, and at least 90 % of the
  functions the order file names for it still exist in the library (a list gone stale fails
  here: re-run the tool) and lie inside that section; likewise those it names for
  .text.numarena_steady (what allocation-heavy programs run after start-up), inside that one.
- A short program under the library (/bin/sleep), under NUMARENA_POLICY=local and bind(0),
  has its text resident in no more 64 KiB windows than the section spans plus one: the kernel
  maps file pages around each one a process touches (fault-around), so functions run at
  start-up that lay across the whole text made every process map ~1.3 MiB of it (16-27
  windows), where the section needs ~6; and each function the list missed (one only a bind
  policy runs, _fini at exit) cost a window of its own.
- The library's .data is at most 16 KiB (its large tables start zeroed, in .bss).
- That program maps neither libm nor libstdc++.so nor libnuma: the library carries its own
  libstdc++, links no libm (cmake/NumarenaPreload.cmake) and makes the memory policy calls
  itself (lib/os/os_linux.cpp), where loading them cost every process 1.45, 0.3 and 0.15-0.45
  MiB (libnuma's constructor reads /proc and /sys through stdio at every start).
- The library defines none of the standard streams (std::cout, ...): its copy of libstdc++
  never constructs them (lib/preload/no_standard_streams.cpp), so one linked in would be used
  unconstructed.
Exit status 0 only when every check passes.
"""
import os
import re
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from checks import check, failed  # noqa: E402
from preload_startup_order import WINDOW, text_symbols  # noqa: E402

SECTION = ".text.numarena_startup"
STEADY_SECTION = ".text.numarena_steady"


def section_of(library, name):
    """(address, size) of the library's section NAME, or None."""
    out = subprocess.run(["readelf", "-SW", library], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.replace("[ ", "[").split()
        if name in fields:
            at = fields.index(name)
            return int(fields[at + 2], 16), int(fields[at + 4], 16)
    return None


def startup_section(library):
    return section_of(library, SECTION)


def resident_text_windows(pid, library):
    """The 64 KiB windows (by file offset) of the library's executable mapping with a page
    present, from /proc/PID/pagemap (bit 63)."""
    windows = set()
    with open("/proc/%d/maps" % pid) as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            if os.path.realpath(fields[5]) != library:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            offset = int(fields[2], 16)
            with open("/proc/%d/pagemap" % pid, "rb") as pagemap:
                pagemap.seek(start // 4096 * 8)
                entries = pagemap.read((end - start) // 4096 * 8)
            for page in range((end - start) // 4096):
                if struct.unpack_from("<Q", entries, page * 8)[0] >> 63:
                    windows.add((offset + page * 4096) // WINDOW)
    return windows


def main():
    library, order_file = os.path.realpath(sys.argv[1]), sys.argv[2]
    section = startup_section(library)
    check(section is not None and section[1] >= 64 * 1024,
          "%s has a %s section of at least 64 KiB (found %s)" % (library, SECTION, section))
    if section is None:
        return failed()
    order = open(order_file).read()
    steady_at = order.find(STEADY_SECTION + " :")
    check(steady_at > 0, "the order file has a %s part" % STEADY_SECTION)
    symbols = text_symbols(library)
    for part, text, minimum in ((SECTION, order[:steady_at], 100),
                                (STEADY_SECTION, order[steady_at:], 10)):
        names = re.findall(r"^\s*\*\(\.text\.(\S+)", text, re.M)
        present = [name for name in names if name in symbols]
        check(len(names) >= minimum and len(present) >= 0.9 * len(names),
              "%d of the order file's %d functions for %s exist in the library (>= 90 %%)"
              % (len(present), len(names), part))
        placed = section_of(library, part)
        check(placed is not None, "%s has a %s section" % (library, part))
        if placed is None:
            continue
        inside = [name for name in present
                  if all(placed[0] <= a < placed[0] + placed[1] for a, _ in symbols[name])]
        check(len(inside) >= 0.9 * len(present),
              "%d of those %d lie inside %s" % (len(inside), len(present), part))
    start, size = section

    # .data is read from the file like text, 64 KiB around each page touched: a table with a
    # non-zero initialiser (the node memory table, 0.7 MiB) put 40-64 KiB of it in every
    # process. Zero-initialised tables live in .bss, whose untouched pages cost nothing.
    data = section_of(library, ".data")
    check(data is not None and data[1] <= 16 * 1024,
          "the library's .data is at most 16 KiB (found %s bytes)" % (data and data[1]))

    streams = {"_ZSt3cin", "_ZSt4cout", "_ZSt4cerr", "_ZSt4clog",
               "_ZSt4wcin", "_ZSt5wcout", "_ZSt5wcerr", "_ZSt5wclog"}
    defined = subprocess.run(["nm", "--defined-only", library], capture_output=True,
                             text=True, check=True).stdout.split()
    present_streams = sorted(streams.intersection(defined))
    check(not present_streams, "the library defines no standard stream (found: %s)"
          % (", ".join(present_streams) or "none"))

    spanned = (start + size - 1) // WINDOW - start // WINDOW + 1
    for policy in ("local", "bind(0)"):
        env = dict(os.environ, LD_PRELOAD=library, NUMARENA_POLICY=policy)
        sleeper = subprocess.Popen(["/bin/sleep", "5"], env=env)
        try:
            time.sleep(1.0)  # past start-up: sleep's nanosleep runs no library code
            windows = resident_text_windows(sleeper.pid, library)
            with open("/proc/%d/maps" % sleeper.pid) as maps:
                mapped = {os.path.basename(line.split()[5]) for line in maps
                          if len(line.split()) >= 6}
        finally:
            sleeper.kill()
            sleeper.wait()
        check(0 < len(windows) <= spanned + 1,
              "/bin/sleep under the library (NUMARENA_POLICY=%s) has its text resident in %d "
              "64 KiB windows (the section spans %d; at most %d)"
              % (policy, len(windows), spanned, spanned + 1))
    unwanted = sorted(name for name in mapped
                      if name.startswith(("libm.so", "libstdc++.so", "libnuma.so")))
    check(not unwanted and any(name.startswith("libc.so") for name in mapped),
          "/bin/sleep under the library maps libc but no libm, libstdc++ or libnuma (unwanted: %s)"
          % (", ".join(unwanted) or "none"))
    return failed()


if __name__ == "__main__":
    sys.exit(main())
