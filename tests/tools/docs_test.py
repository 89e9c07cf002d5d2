"""The documentation's promises about itself, checked on this checkout:

- every relative link and image in README.md, docs/*.md and bench/RESULTS.md points at a file
  that exists, and every #anchor at a heading of the page it names (GitHub's anchors);
- bench/results/ holds one run of each benchmark: result files of one kind (the program that
  wrote them, and the node count for numarena's own JSON) lie in one run directory, started
  within RUN_SPAN of each other; so every file the documents link there is the newest of its
  kind;
- every chart under bench/results/ says in its PNG metadata which JSON files it was drawn from
  (they exist, and are that newest run) and carries in its title the date that run started,
  a machine and a commit: a chart older than its data, or of a run that was replaced, fails;
- the layer table of docs/design.md lists the layers of cmake/CheckLayers.cmake, in order.

Each rule is also run on a small synthetic tree that breaks it, so that none of them passes
for want of looking. Run by ctest ("docs: links, bench/results and the layer table") with
Debian's python3 and MPLBACKEND=Agg (tools/plot_results.py, whose run-date rule it shares,
imports matplotlib).
"""
import datetime
import json
import os
import re
import struct
import sys
import tempfile
import unittest
import zlib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import plot_results  # noqa: E402  (doc_time, stamp_date: what the charts' titles are made of)

DOCUMENTS = ["README.md", "bench/RESULTS.md"]  # and docs/*.md
RESULTS = "bench/results"
RUN_SPAN = datetime.timedelta(hours=3)  # one run of bench/server_workloads.sh takes ~10 min
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def documents(root):
    docs_dir = os.path.join(root, "docs")
    pages = sorted(os.path.join("docs", f) for f in os.listdir(docs_dir) if f.endswith(".md")) \
        if os.path.isdir(docs_dir) else []
    return [d for d in DOCUMENTS if os.path.exists(os.path.join(root, d))] + pages


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code spans removed."""
    inside = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, INLINE_CODE.sub("", line)


def anchors(path):
    """The anchors GitHub makes of a Markdown file's headings."""
    seen, result = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for _, line in prose_lines(text.replace("`", "")):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(2).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def link_problems(root):
    problems = []
    for doc in documents(root):
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(root, os.path.dirname(doc), path)) if path \
                    else os.path.join(root, doc)
                where = f"{doc}:{number}: {target}"
                if not os.path.exists(full):
                    problems.append(f"{where}: no such file")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    problems.append(f"{where}: no heading makes the anchor #{anchor}")
    return problems


# ---- bench/results -----------------------------------------------------------------------

def result_kind(doc):
    """What wrote a result file: numarena's schema (with its node count: the NUMA lab's runs
    are another machine's), a Google Benchmark program, or bench/llama_bench.py."""
    if "schema" in doc:
        nodes = doc.get("memory_nodes") or doc.get("cpu_nodes") or []
        return f"{doc['schema']} on {len(nodes)} node(s)"
    if "benchmarks" in doc and "context" in doc:
        return os.path.basename(doc["context"].get("executable", "?"))
    if "program" in doc and "started" in doc:
        return doc["program"]
    if doc.get("benchmark") == "override" and "date" in doc:
        return "override_bench.py"
    if "medians" in doc and "started" in doc:
        return "llama_bench.py"
    return None


def run_dir(relpath):
    """A run's directory: bench/rss_runs.sh's `rss/` belongs to the run around it."""
    directory = os.path.dirname(relpath)
    return os.path.dirname(directory) if os.path.basename(directory) == "rss" else directory


def result_files(root):
    """{relative path: (kind, start time)} of every JSON result under bench/results."""
    found = {}
    for base, _, files in os.walk(os.path.join(root, RESULTS)):
        for name in files:
            if name.endswith(".json"):
                path = os.path.join(base, name)
                doc = plot_results.load(path)
                found[os.path.relpath(path, root)] = (result_kind(doc), plot_results.doc_time(doc))
    return found


def png_text(path):
    """The tEXt chunks of a PNG file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    text, i = {}, 8
    while i + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"tEXt":
            key, _, value = data[i + 8:i + 8 + length].partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        i += 12 + length
    return text


def results_problems(root):
    problems = []
    files = result_files(root)
    runs = {}  # kind -> {run directory: [times]}
    for path, (kind, time) in sorted(files.items()):
        if kind is None or time is None:
            problems.append(f"{path}: not a result file this check knows (no program or date)")
            continue
        runs.setdefault(kind, {}).setdefault(run_dir(path), []).append(time)
    newest_run = {}
    for kind, by_dir in runs.items():
        ordered = sorted(by_dir.items(), key=lambda item: max(item[1]))
        newest_dir, newest_times = ordered[-1]
        newest_run[kind] = newest_dir
        for directory, times in ordered[:-1]:
            problems.append(f"{directory}: an older run of {kind} ({min(times):%Y-%m-%d %H:%MZ}) "
                            f"beside the newest, {newest_dir} ({min(newest_times):%Y-%m-%d %H:%MZ}): "
                            "summarise it in bench/RESULTS.md and git rm it")
        if max(newest_times) - min(newest_times) > RUN_SPAN:
            problems.append(f"{newest_dir}: files of {kind} from {min(newest_times):%Y-%m-%d %H:%MZ} "
                            f"to {max(newest_times):%Y-%m-%d %H:%MZ}: more than one run")
    for base, _, names in os.walk(os.path.join(root, RESULTS)):
        for name in sorted(n for n in names if n.endswith(".png")):
            problems += chart_problems(root, os.path.join(base, name), files, newest_run)
    return problems


def chart_problems(root, path, files, newest_run):
    rel = os.path.relpath(path, root)
    meta = png_text(path) or {}
    title, sources = meta.get("Title", ""), meta.get("Source", "").split()
    if not title or not sources:
        return [f"{rel}: no Title or Source in its metadata: draw it with tools/plot_results.py "
                "or bench/llama_bench.py"]
    problems = []
    paths = [os.path.normpath(os.path.join(os.path.dirname(path), s)) for s in sources]
    for source in paths:
        source_rel = os.path.relpath(source, root)
        if source_rel not in files:
            problems.append(f"{rel}: drawn from {source_rel}, which is not in {RESULTS}")
        elif newest_run.get(files[source_rel][0]) != run_dir(source_rel):
            problems.append(f"{rel}: drawn from {source_rel}, not the newest run of its kind")
    if problems:
        return problems
    date = plot_results.stamp_date(paths)
    m = re.search(re.escape(date) + r", (.+), commit [0-9a-f]{7,40}\b", title)
    if not m:
        problems.append(f"{rel}: its title does not say '{date}, <machine>, commit <hash>' (the "
                        f"date its data's run started): {title!r}")
    return problems


# ---- layers ------------------------------------------------------------------------------

def layer_problems(root):
    with open(os.path.join(root, "cmake", "CheckLayers.cmake"), encoding="utf-8") as f:
        m = re.search(r"^set\(NUMARENA_LAYERS ([^)]*)\)", f.read(), re.M)
    layers = m.group(1).split() if m else []
    with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
        table = re.findall(r"^\| *\d+ *\| *`lib/([a-z_]+)`", f.read(), re.M)
    if not layers or table != layers:
        return [f"docs/design.md lists the layers {table}, cmake/CheckLayers.cmake {layers}"]
    return []


def problems(root):
    return link_problems(root) + results_problems(root) + layer_problems(root)


# ---- tests -------------------------------------------------------------------------------

def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_png(root, rel, text):
    """A PNG file whose only content that matters here is its tEXt chunks."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    body = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    for key, value in text.items():
        body += chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    body += chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b"")
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)


def bench_json(date, executable="build/bench/peers_bench"):
    return json.dumps({"context": {"date": date, "executable": executable}, "benchmarks": []})


class Tree:
    """A small checkout that passes every rule; each test breaks one."""

    def __init__(self, root):
        self.root = root
        write(root, "cmake/CheckLayers.cmake", "set(NUMARENA_LAYERS base os)\n")
        write(root, "docs/design.md", "# Design\n\n## The layers\n\n| # | folder |\n|---|---|\n"
                                      "| 1 | `lib/base` |\n| 2 | `lib/os` |\n")
        write(root, "bench/RESULTS.md", "# Results\n\n## The run (2026-01-02)\n\n"
                                        "[run](results/run/)\n")
        write(root, "bench/results/run/peers_bench.1.json", bench_json("2026-01-02T10:00:00+00:00"))
        write(root, "bench/results/run/rss/peers_bench.1.1.json",
              bench_json("2026-01-02T10:20:00+00:00"))
        write(root, "README.md", "# x\n\n![chart](bench/results/run/chart.png)\n"
                                 "[the run](bench/RESULTS.md#the-run-2026-01-02)\n"
                                 "```sh\n[not a link](nowhere)\n```\n")
        self.chart("2026-01-02 10:00Z")

    def chart(self, date, source="peers_bench.1.json"):
        write_png(self.root, "bench/results/run/chart.png",
                  {"Title": f"peers - {date}, 2-CPU test machine, commit 0123abc", "Source": source})


class DocsTest(unittest.TestCase):
    def test_this_checkout(self):
        self.assertEqual(problems(ROOT), [])

    def check(self, breaks, expected):
        with tempfile.TemporaryDirectory() as root:
            tree = Tree(root)
            self.assertEqual(problems(root), [], "the synthetic tree must pass before it is broken")
            breaks(tree)
            found = problems(root)
            self.assertTrue(any(expected in p for p in found), f"no '{expected}' in {found}")

    def test_a_missing_file_is_found(self):
        self.check(lambda t: write(t.root, "docs/page.md", "# Page\n\n[x](../bench/results/gone.png)\n"),
                   "docs/page.md:3: ../bench/results/gone.png: no such file")

    def test_a_missing_anchor_is_found(self):
        self.check(lambda t: write(t.root, "docs/page.md", "# Page\n\n[x](../README.md#nowhere)\n"),
                   "no heading makes the anchor #nowhere")

    def test_an_older_run_kept_beside_the_newest_is_found(self):
        self.check(lambda t: write(t.root, "bench/results/old/peers_bench.1.json",
                                   bench_json("2025-12-30T10:00:00+00:00")),
                   "bench/results/old: an older run of peers_bench")

    def test_two_runs_in_one_directory_are_found(self):
        self.check(lambda t: write(t.root, "bench/results/run/peers_bench.2.json",
                                   bench_json("2026-01-02T18:00:00+00:00")),
                   "more than one run")

    def test_a_chart_of_a_replaced_run_is_found(self):
        def breaks(tree):
            write(tree.root, "bench/results/new/peers_bench.1.json",
                  bench_json("2026-01-03T10:00:00+00:00"))
        self.check(breaks, "chart.png: drawn from bench/results/run/peers_bench.1.json, not the "
                           "newest run of its kind")

    def test_a_chart_dated_other_than_its_data_is_found(self):
        self.check(lambda t: t.chart("2025-12-31 09:00Z"), "its title does not say '2026-01-02 10:00Z")

    def test_a_chart_without_metadata_is_found(self):
        self.check(lambda t: write_png(t.root, "bench/results/run/chart.png", {}),
                   "no Title or Source in its metadata")

    def test_a_chart_without_a_commit_is_found(self):
        self.check(lambda t: write_png(t.root, "bench/results/run/chart.png", {
            "Title": "peers - 2026-01-02 10:00Z, 2-CPU test machine", "Source": "peers_bench.1.json"}),
            "its title does not say")

    def test_a_layer_table_out_of_step_is_found(self):
        self.check(lambda t: write(t.root, "cmake/CheckLayers.cmake", "set(NUMARENA_LAYERS base os kv)\n"),
                   "docs/design.md lists the layers ['base', 'os']")


if __name__ == "__main__":
    unittest.main(verbosity=2)
