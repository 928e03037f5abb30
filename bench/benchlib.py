"""What the benchmarks under bench/ share: their command line (the options every script takes,
and --child, which runs one measurement in a fresh process), the parent's side of a child
process, reading /proc, warming the page cache, priming memory, describing the machine and the
other work on it, the numbers' formats and tables, and writing one section of BENCHMARKS.md."""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

MIB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
OUTPUT = os.path.join(REPO, "BENCHMARKS.md")
QUICK_OUTPUT = os.path.join(DATA, "BENCHMARKS-quick.md")

PRIME_CODE = "import numpy as np, sys; np.ones(int(sys.argv[1]) << 20, np.uint8)"


# --------------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    """The options every benchmark takes, and the --child entry point.

    Always: --output PATH (default: BENCHMARKS.md at the repository root; with --quick, where
    `quick_output` is set, bench/data/BENCHMARKS-quick.md) and --child SPEC (hidden: runs one
    measurement, see child_main). Where asked for: --repeat N (default `repeat`), --wait-idle
    with --max-wait S (see settle), --quick (help text `quick`)."""

    def __init__(self, doc, *, repeat=None, repeat_help="fresh processes per row",
                 wait_idle=False, quick=None, quick_output=True):
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.quick_output = quick_output
        self.add_argument("--child", help=argparse.SUPPRESS)
        self.add_argument("--output", help="the file the section is written to (default: "
                          "BENCHMARKS.md at the repository root"
                          + ("; bench/data/BENCHMARKS-quick.md with --quick)"
                             if quick and quick_output else ")"))
        if repeat is not None:
            self.add_argument("--repeat", type=int, default=repeat,
                              help=f"{repeat_help} (default %(default)s)")
        if wait_idle:
            self.add_argument("--wait-idle", action="store_true",
                              help="first wait (up to --max-wait s) for the 1-minute load "
                                   "average to fall below 0.5")
            self.add_argument("--max-wait", type=float, default=600,
                              help="longest wait of --wait-idle, in seconds (default 600)")
        if quick:
            self.add_argument("--quick", action="store_true", help=quick)

    def parse(self, child=None, argv=None):
        """The parsed arguments, --output filled in. With --child SPEC, runs child(spec) instead
        and ends the process (child_main)."""
        args = self.parse_args(argv)
        if args.child is not None:
            if child is None:
                self.error("--child: this script has no child measurements")
            child_main(child, args.child)
        if args.output is None:
            quick = getattr(args, "quick", False) and self.quick_output
            args.output = QUICK_OUTPUT if quick else OUTPUT
        return args


def child_main(child, spec_json):
    """The child's side: child(spec) -> a JSON-able result, printed as the last line of stdout.
    The process then ends with os._exit(0): interpreter shutdown is neither measured nor
    waited for (voxpipe 0.1.0 hung at exit after a threaded read; bench_nifti.py)."""
    result = child(json.loads(spec_json))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


# --------------------------------------------------------------------------------------------
# The parent's side of a child process.
# --------------------------------------------------------------------------------------------

class ChildError(RuntimeError):
    """A child that failed: `summary` (a line: its error, exit status or timeout) and the tail
    of its stderr."""

    def __init__(self, script, spec, summary, stderr=""):
        text = json.dumps(spec)
        text = text if len(text) <= 300 else text[:300] + " ..."
        super().__init__(f"{os.path.basename(script)} --child {text}: {summary}"
                         + (f"\n{stderr}" if stderr else ""))
        self.summary, self.stderr = summary, stderr


def run_child(script, spec, timeout=None, cwd=REPO):
    """Run `script --child json(spec)` in a fresh interpreter and return the JSON of the last
    line it printed (child_main's result). Raises ChildError when it fails, times out (after
    `timeout` s; None: no limit) or prints no result."""
    cmd = [sys.executable, os.path.abspath(script), "--child", json.dumps(spec)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise ChildError(script, spec, f"timed out after {timeout} s") from None
    stderr = p.stderr[-3000:]
    if p.returncode != 0:
        summary = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        if p.returncode < 0:
            summary = f"killed by signal {-p.returncode}; {summary}"
        raise ChildError(script, spec, summary, stderr)
    lines = p.stdout.strip().splitlines()
    if not lines:
        raise ChildError(script, spec, "the child printed no result", stderr)
    return json.loads(lines[-1])


def try_child(script, spec, timeout=600, cwd=REPO):
    """run_child, with a failure returned as {"error": summary[, "stderr": tail]} instead of
    raised, for reports that show the failed rows and go on."""
    try:
        return run_child(script, spec, timeout, cwd)
    except ChildError as e:
        return {"error": e.summary, **({"stderr": e.stderr} if e.stderr else {})}


def interleaved(rows, repeat):
    """(round, label, spec) for `repeat` rounds of rows [(label, spec)], the order reversed every
    other round, so that a slow drift of the machine does not favour one row."""
    for r in range(repeat):
        for label, spec in (rows if r % 2 == 0 else rows[::-1]):
            yield r, label, spec


def medians(runs, keys):
    """{key: median over `runs` (dicts)} for the keys of `keys` that the first run has."""
    return {k: statistics.median(r[k] for r in runs) for k in keys if k in runs[0]}


def summarise_rows(runs, fields):
    """The results of interleaved first/warm children per row: {label: {"error": the first
    failed run's {"error", "stderr"} or None, "n": runs that succeeded, "first"/"warm":
    {"median", "min" of "seconds", and the median of each of `fields` the runs have,
    "whole_process"}}}. `runs`: {label: [child results]}, in the rows' order."""
    out = {}
    for label in runs:
        ok = [x for x in runs[label] if "error" not in x]
        errors = [x for x in runs[label] if "error" in x]
        s = {"error": errors[0] if errors else None, "n": len(ok)}
        for k in ("first", "warm"):
            xs = [x[k] for x in ok if k in x]
            if xs:
                times = [x["seconds"] for x in xs]
                s[k] = {"median": statistics.median(times), "min": min(times),
                        "whole_process": xs[0].get("whole_process", False),
                        **medians(xs, fields)}
        out[label] = s
    return out


def run_log(r, repeat, label, res, extra=lambda x: ""):
    """A progress line for one child: its first (and warm) times, or its error."""
    return f"  [{r + 1}/{repeat}] {label}: " + (
        f"error: {res['error']}" if "error" in res else
        ", ".join(f"{k} {res[k]['seconds']:.3f} s" + extra(res[k])
                  for k in ("first", "warm") if k in res))


# --------------------------------------------------------------------------------------------
# In the measured process.
# --------------------------------------------------------------------------------------------

def vm(field):
    """A field of /proc/self/status (VmRSS, VmHWM, RssAnon, RssFile, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    """Make VmHWM restart from the current RSS, so that the peak measured next is the call's.
    False where /proc/self/clear_refs is not writable (Linux < 4.0): the peak then includes
    earlier ones."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measured(call):
    """(call's result, its seconds, its peak RSS growth in MiB over the RSS before it)."""
    base = vm("VmRSS")
    reset_peak_rss()
    t0 = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - t0
    return result, seconds, (vm("VmHWM") - base) / MIB


def warm(*paths):
    """Read the files once, so that every tool then sees a warm page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 * MIB):
                pass


def prime_memory(mib=3072):
    """Touch `mib` MiB (0: nothing) in a throwaway process right before each measurement: on
    this kind of VM memory left untouched for a few seconds goes back to the host and the next
    process to touch it pays up to ~10x per page fault (the same nibabel read measured 0.6 s
    right after a big allocation and 8.8 s after 20 s idle), which would land on whichever case
    runs after a pause. The first call still pays the guest's own page faults."""
    if mib > 0:
        subprocess.run([sys.executable, "-c", PRIME_CODE, str(mib)], check=True)


# --------------------------------------------------------------------------------------------
# The machine.
# --------------------------------------------------------------------------------------------

def versions(modules):
    """{module: version} for the modules that import, "missing" for the others: the module's
    __version__, else its installed distribution's (tensorstore has no __version__)."""
    from importlib import metadata
    out = {}
    for mod in modules:
        try:
            version = getattr(__import__(mod), "__version__", None)
        except ImportError:
            out[mod] = "missing"
            continue
        if version is None:
            try:
                version = metadata.version(mod)
            except metadata.PackageNotFoundError:
                version = "?"
        out[mod] = version
    return out


def versions_text(modules_or_versions):
    """"voxpipe 0.3.0, numpy 2.1.0": of a {module: version} or of versions(modules)."""
    vers = (modules_or_versions if isinstance(modules_or_versions, dict)
            else versions(modules_or_versions))
    return ", ".join(f"{k} {v}" for k, v in vers.items())


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def memory_bytes():
    """MemTotal of /proc/meminfo in bytes (0 where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def stamp(cores=None):
    """"2026-03-15 10:12 UTC; <cpu>, N cores": when and where, as every section opens."""
    return (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {cpu_name()}, "
            f"{cores or os.cpu_count()} cores")


def python():
    """This interpreter, relative to the repository when inside it (.venv/bin/python)."""
    return (os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO)
            else sys.executable)


def command():
    """The command line of this run, as the report quotes it."""
    return f"{python()} bench/{os.path.basename(sys.argv[0])} {' '.join(sys.argv[1:])}".strip()


def git_state():
    """The commit measured, noting library sources modified since it."""
    def git(*a):
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=REPO).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "include", "python")
    return (git("rev-parse", "--short", "HEAD") or "?") + (" (library sources modified)"
                                                           if dirty else "")


def cpu_snapshot():
    """(machine busy CPU s, steal s, CPU s used by this benchmark and its children, wall s).

    Other work on the machine (builds, tests) skews every number, multi-threaded voxpipe most;
    busy time not spent by this benchmark tells how much of it there was during the run."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / hz  # user nice system irq softirq
    steal = v[7] / hz if len(v) > 7 else 0.0
    ours = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    return busy, steal, ours, time.time()


def other_work(before, after, cores=None):
    """Between two cpu_snapshot()s: {"others": CPU-s of other work on the machine, "ours": CPU-s
    of this benchmark, "steal": s, "wall": s, "capacity": the cores' CPU-s, "share": others in %
    of capacity}."""
    (b0, s0, o0, t0), (b1, s1, o1, t1) = before, after
    wall = t1 - t0
    capacity = wall * (cores or os.cpu_count() or 1)
    others = max(b1 - b0 - (o1 - o0), 0.0)
    return {"others": others, "ours": o1 - o0, "steal": s1 - s0, "wall": wall,
            "capacity": capacity, "share": 100 * others / max(capacity, 1e-9)}


def other_work_sentence(use, who="this benchmark", busy="The machine was busy: the numbers are "
                        "noisy."):
    """"Other work on the machine during the run: ... (this benchmark used ...)", with `busy` in
    bold after it when other work took more than a tenth of the cores. `use`: other_work's."""
    cap = use["capacity"]
    return (f"Other work on the machine during the run: {use['others']:.0f} CPU-seconds, "
            f"{use['share']:.0f}% of the cores ({who} used {100 * use['ours'] / cap:.0f}%; "
            f"hypervisor steal {100 * use['steal'] / cap:.0f}%)."
            + (f" **{busy}**" if use["others"] > 0.1 * cap else ""))


def other_work_brief(use, steal=True):
    """"{others} CPU-s in {wall} s ({share}% of the cores; steal {s} s)"."""
    return (f"{use['others']:.0f} CPU-s in {use['wall']:.0f} s ({use['share']:.0f}% of the cores"
            + (f"; steal {use['steal']:.0f} s)" if steal else ")"))


def wait_idle(limit=0.5, poll=30, max_wait=600):
    """Wait (up to max_wait s) for the 1-minute load average to drop below `limit`; returns
    (the load average then, seconds waited)."""
    t0 = time.time()
    while True:
        load = os.getloadavg()[0]
        if load < limit or time.time() - t0 >= max_wait:
            return load, time.time() - t0
        print(f"load average {load:.2f}, waiting ...", flush=True)
        time.sleep(poll)


def settle(args):
    """wait_idle(max_wait=args.max_wait) with --wait-idle, else (the load average now, 0.0)."""
    if getattr(args, "wait_idle", False):
        return wait_idle(max_wait=args.max_wait)
    return os.getloadavg()[0], 0.0


# --------------------------------------------------------------------------------------------
# Numbers and tables.
# --------------------------------------------------------------------------------------------

def ms(s):
    """1.5 ms / 2.25 s."""
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def fmt_s(s):
    """12.3 ms / 1.234 s / 12.3 s."""
    return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s:.3f} s" if s < 10 else f"{s:.1f} s"


def fmt_t(x, fmt=fmt_s):
    """"median (min)" of summarise_rows' {"median", "min"}, "n/a" without one."""
    return "n/a" if not x else f"{fmt(x['median'])} ({fmt(x['min'])})"


def fmt_mb(b):
    """Bytes as MB (10^6): 0.123 below 1 MB, 12.3 above."""
    return f"{b / 1e6:.3f}" if b < 1e6 else f"{b / 1e6:.1f}"


def ratio(a, b):
    """a / b, None where either is missing or 0."""
    return a / b if a and b else None


def fmt_x(x):
    """A ratio in bold, "n/a" for None."""
    return "n/a" if x is None else f"**{x:.2f}x**" if x < 100 else f"**{x:.0f}x**"


def row(*cells):
    """A markdown table row; an empty cell is "| |"."""
    return "|" + "|".join(f" {c} " if c != "" else " " for c in cells) + "|"


def table_head(*columns):
    """A markdown table's header and rule lines."""
    return [row(*columns), "|" + "---|" * len(columns)]


def targets_lines(heading, targets):
    """A "target | measured | status" table under `heading`, for [(target, measured, status)]."""
    return ([f"{heading}\n"] + table_head("target", "measured", "status")
            + [row(*t) for t in targets] + [""])


def errors_lines(heading, errors, prefix=""):
    """The rows that failed, [(case, label, {"error"[, "stderr"]})], each with the tail of its
    stderr; nothing when there are none."""
    if not errors:
        return []
    lines = [f"{heading}\n"]
    for case, label, e in errors:
        lines.append(f"- {prefix}{case}, {label}: `{e['error']}`")
        if e.get("stderr"):
            lines.append("  ```\n  " + e["stderr"].strip().replace("\n", "\n  ")[-1500:]
                         + "\n  ```")
    return lines + [""]


def write_section(path, text, begin, end):
    """Replace the text between the `begin` and `end` markers of `path` (appended when absent)."""
    old = open(path).read() if os.path.exists(path) else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + text.rstrip("\n") + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new)


def publish(path, text, begin, end):
    """write_section, then print the section."""
    write_section(path, text, begin, end)
    print(text)
