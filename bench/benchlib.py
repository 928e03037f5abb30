"""What the benchmarks under bench/ share: reading /proc, warming the page cache, priming
memory, describing the machine, and writing one section of BENCHMARKS.md."""
import os
import platform
import resource
import subprocess
import sys
import time

MIB = 1024 * 1024

PRIME_CODE = "import numpy as np, sys; np.ones(int(sys.argv[1]) << 20, np.uint8)"


def vm(field):
    """A field of /proc/self/status (VmRSS, VmHWM, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    """Make VmHWM restart from the current RSS, so that the peak measured next is the call's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def warm(*paths):
    """Read the files once, so that every tool then sees a warm page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 * MIB):
                pass


def prime_memory(mib=3072):
    """Touch `mib` MiB in a throwaway process right before each measurement: on this kind of VM
    memory left untouched for a few seconds goes back to the host and the next process to touch
    it pays up to ~10x per page fault (bench_nifti.py, prime_memory), which would land on
    whichever case runs after a pause."""
    subprocess.run([sys.executable, "-c", PRIME_CODE, str(mib)], check=True)


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


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


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


def wait_idle(limit=0.5, poll=30, max_wait=600):
    """Wait (up to max_wait s) for the 1-minute load average to drop below `limit`."""
    t0 = time.time()
    while True:
        load = os.getloadavg()[0]
        if load < limit or time.time() - t0 >= max_wait:
            return load, time.time() - t0
        print(f"load average {load:.2f}, waiting ...", flush=True)
        time.sleep(poll)
