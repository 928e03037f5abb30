#!/usr/bin/env python
"""voxpipe against nibabel reading through s3fs, and obstore against s3fs, on objects in an S3
bucket served on localhost, in one run.

Writes the "remote" section of BENCHMARKS.md (between its markers; the rest of the file is left
as it is) and prints it.

The server: moto's S3 in its own process (this script with --server), so that it does not share
the measured client's GIL, on 127.0.0.1 over plain HTTP, behind a WSGI layer that counts the
requests and the bytes it sends. Loopback has no latency and next to no bandwidth limit: this
measures what the clients do (requests, bytes, decoding), a best case for readers that make
many small requests.

The clients are configured by the environment, as the users' own code would be (the parent
sets AWS_ENDPOINT_URL, AWS_ALLOW_HTTP=true, dummy keys and a region for its children):
nibabel reads a .nii.gz through s3fs the way users do today, an s3fs file object under
``gzip.GzipFile`` in a ``nib.FileHolder`` (pyAFQ's ``s3fs_nifti_read`` pattern, lazily), and
voxpipe reads the URL itself (``vp.load(url)``).

Cases (each row in a fresh child process, rows interleaved with the order reversed every
repeat, memory primed before each; times are median (min) of the timed call only, imports not
included):
  1. one volume from the middle of bench/data/bold_4d.nii.gz (make_data.py: 96x96x60x300 int16,
     gzip -6, 171 MB) with its seek index uploaded next to it (vp.gz.build_index's sidecar,
     FILE.gz.gzidx): ``dataobj[..., 150]``, first and warm call; time, requests, bytes.
  2. the whole series to float32: nibabel + s3fs, voxpipe from the URL, and voxpipe from the
     same file (and sidecar) on local disk.
  3. the first --files (40) T1-size files of bench_many.py's set (256x256x176 int16 .nii.gz,
     made when missing) to float32: a nibabel + s3fs loop, a ``vp.load(url)`` loop and, when
     it accepts URLs, ``vp.iter_load(urls)``.
  4. obstore against s3fs on one 64 MiB object of random bytes: the whole object, 100 ranged
     reads of 256 KiB one after another, the same 100 in one concurrent call
     (``obstore.get_ranges`` / ``fs.cat_ranges``), and through an s3fs file object.
  5. the seek index of the series object, ``vp.gz.build_index(url, output=FILE)`` (exact, and
     ``exact=False``), against a whole read of the same object (``vp.load(url)``: its int16
     ``dataobj``, and ``get_fdata(dtype=np.float32)``), every row with an empty local index
     cache; time, requests, bytes, peak memory.
Every result is checked against the other readers' (CRC-32 of the returned bytes).

Usage: .venv/bin/python bench/bench_remote.py [--repeat N] [--files N] [--quick] [--output PATH]
       [--wait-idle]
Inputs: .venv/bin/python bench/make_data.py (bold_4d.nii.gz, t1_3d.nii).
"""
import argparse
import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

from benchlib import (DATA, MIB, Parser, command, cpu_snapshot, errors_lines, fmt_mb, fmt_s, fmt_t,
                      fmt_x, interleaved, measured, other_work, other_work_sentence,
                      prime_memory, publish, ratio, run_log, settle, stamp, summarise_rows,
                      targets_lines, try_child, versions_text)

INDEX_CACHE = os.path.join(DATA, "remote", "index-cache")
SERIES = os.path.join(DATA, "bold_4d.nii.gz")
# The series as it is uploaded: the file (a hard link) and its seek index next to it, so that
# voxpipe on local disk sees what voxpipe sees in the bucket.
STAGE = os.path.join(DATA, "remote")
BEGIN = "<!-- remote benchmark: begin -->"
END = "<!-- remote benchmark: end -->"
BUCKET = "voxpipe-bench"
SERIES_KEY = "series/bold_4d.nii.gz"
RAW_KEY = "raw/random.bin"
RAW_BYTES = 64 * MIB
RANGE_BYTES = 256 * 1024
N_RANGES = 100
COUNTERS_PATH = "/_bench/counters"  # not an S3 path: bucket names have no underscores
# Memory touched in a throwaway process before each child (benchlib.prime_memory): the series
# and many-files cases allocate GBs, the others a few MB.
PRIME_MIB = {"volume": 512, "series": 3072, "many": 3072, "raw": 512, "index": 3072}
VERSIONED = ("voxpipe", "nibabel", "numpy", "obstore", "s3fs", "fsspec", "aiobotocore",
             "botocore", "moto")


# --------------------------------------------------------------------------------------------
# The server process.
# --------------------------------------------------------------------------------------------

class CountingApp:
    """WSGI layer in front of moto: counts requests (by method, and the GETs with a Range
    header) and the bytes of every response (status line, the application's headers, body).
    The bytes are counted as they are handed to the server, before the client can have them,
    so a client that asks for the totals after its reads sees them all. GET COUNTERS_PATH
    answers the totals as JSON and is not counted."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.totals = collections.Counter()

    def add(self, **kw):
        with self.lock:
            self.totals.update(kw)

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == COUNTERS_PATH:
            with self.lock:
                body = json.dumps(self.totals).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        method = environ.get("REQUEST_METHOD", "?")
        ranged = method == "GET" and "HTTP_RANGE" in environ
        self.add(requests=1, **{method: 1}, **({"ranged_GET": 1} if ranged else {}))

        def counting_start_response(status, headers, exc_info=None):
            head = len("HTTP/1.1 \r\n\r\n") + len(status) + sum(len(k) + len(v) + 4
                                                                 for k, v in headers)
            self.add(bytes=head)
            return start_response(status, headers, exc_info)

        return self.counted(self.app(environ, counting_start_response))

    def counted(self, result):
        try:
            for chunk in result:
                self.add(bytes=len(chunk), body_bytes=len(chunk))
                yield chunk
        finally:
            if hasattr(result, "close"):
                result.close()


def serve_stored_bytes(fake_key):
    """moto reads an object's whole stored value for every GET, a ranged one too, and slices the
    range out of it afterwards: every ranged read costs the server the object's full size, and
    that cost lands on whichever client makes more requests (100 reads of 256 KiB from a 64 MiB
    object took obstore 5.6-5.9 s from stock moto 5.2.5 on the 2-core build machine, 0.3-0.5 s
    here). Here each stored value is read once and the same bytes object handed out after
    that, so a request costs the server what it sends."""
    stored = fake_key.value

    def get(self):
        value = self.__dict__.get("_bench_value")
        if value is None:
            value = self.__dict__["_bench_value"] = stored.fget(self)
        return value

    def set_(self, value):
        self.__dict__.pop("_bench_value", None)
        stored.fset(self, value)

    fake_key.value = property(get, set_)


def serve():
    """The S3 server: prints its port, serves until stdin closes (the parent ended)."""
    from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                               create_backend_app)
    from moto.s3.models import FakeKey
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request
    serve_stored_bytes(FakeKey)
    app = CountingApp(DomainDispatcherApplication(create_backend_app))
    # As moto's ThreadedMotoServer builds it: threaded, so HTTP/1.1 with keep-alive.
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


class Server:
    """The --server process, seen from the parent."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--server"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            sys.exit(f"the S3 server did not start (it printed {line!r})")
        self.endpoint = f"http://127.0.0.1:{int(line)}"

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def counters(endpoint):
    with urllib.request.urlopen(endpoint + COUNTERS_PATH, timeout=30) as r:
        return collections.Counter(json.loads(r.read()))


# --------------------------------------------------------------------------------------------
# Child side: one measurement in a fresh process.
# --------------------------------------------------------------------------------------------

def crc(chunks):
    """CRC-32 of the concatenated buffers (bytes, obstore Bytes; arrays in C order, so that
    equal arrays agree whatever their memory layout)."""
    import zlib

    import numpy as np
    c = 0
    for b in chunks:
        if isinstance(b, np.ndarray):
            b = np.ascontiguousarray(b)
        c = zlib.crc32(memoryview(b).cast("B"), c)
    return c


def sample_crc(arr):
    """What the many-files loops do with each result: CRC-32 of every 7th voxel along each axis
    (about 1/343 of it: well under a millisecond), so that the results can be compared without
    keeping them."""
    return crc([arr[::7, ::7, ::7]])


def nib_image(fs, url, stack):
    """nibabel's image of the .nii.gz at `url` read through s3fs as users read one today: the
    s3fs file object, gzip.GzipFile over it, in a FileHolder (pyAFQ's s3fs_nifti_read without
    its eager read, so that a volume is read lazily). The files close with `stack`."""
    import gzip

    import nibabel as nib
    f = stack.enter_context(fs.open(url, "rb"))
    fh = nib.FileHolder(fileobj=stack.enter_context(gzip.GzipFile(fileobj=f, mode="rb")))
    return nib.Nifti1Image.from_file_map({"header": fh, "image": fh})


def make_call(spec):
    """call() -> list of results (arrays or buffers) for this measurement. Every module the call
    uses is imported here, before the clock starts; client objects (the s3fs filesystem, the
    obstore store) are made inside the call, as a script makes them."""
    import contextlib

    import numpy as np
    case, tool = spec["case"], spec["tool"]
    urls = spec.get("urls")
    if tool == "nibabel":
        import gzip  # noqa: F401  (used by nib_image)

        import nibabel  # noqa: F401
        import s3fs

        def nib_read(url, read):
            with contextlib.ExitStack() as stack:
                return read(nib_image(s3fs.S3FileSystem(), url, stack))
        if case == "volume":
            return lambda: [nib_read(urls[0], lambda img: img.dataobj[..., spec["t"]])]
        read = lambda img: img.get_fdata(dtype=np.float32)  # noqa: E731
        if case == "many":
            return lambda: [sample_crc(nib_read(u, read)) for u in urls]
        return lambda: [nib_read(u, read) for u in urls]
    if tool in ("voxpipe", "voxpipe_local", "iter_load"):
        # The seek-index cache: "shared" (filled by vp.gz.build_index(url, cache=True) before
        # the runs: the index is found locally) or "cold" (an empty one: the index is read from
        # the bucket).
        if spec.get("cache") == "shared":
            os.environ["VOXPIPE_CACHE_DIR"] = INDEX_CACHE
        elif spec.get("cache") == "cold":
            import tempfile
            os.environ["VOXPIPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="voxpipe-bench-cache-")
        import voxpipe as vp
        if tool != "voxpipe_local":
            import obstore  # noqa: F401  (voxpipe imports it on its first URL)
        if case == "volume":
            return lambda: [vp.load(urls[0]).dataobj[..., spec["t"]]]
        if spec.get("op") == "int16":
            return lambda: [np.asanyarray(vp.load(u).dataobj) for u in urls]
        if tool == "iter_load":
            return lambda: [sample_crc(a) for a in vp.iter_load(urls)]
        if case == "many":
            return lambda: [sample_crc(vp.load(u).get_fdata(dtype=np.float32)) for u in urls]
        return lambda: [vp.load(u).get_fdata(dtype=np.float32) for u in urls]

    if tool == "build_index":
        import tempfile

        import obstore  # noqa: F401  (voxpipe imports it on its first URL)
        import voxpipe as vp
        out = os.path.join(tempfile.mkdtemp(prefix="voxpipe-bench-index-"), "series.gzidx")

        def call():
            vp.gz.build_index(urls[0], output=out, exact=spec["exact"])
            with open(out, "rb") as f:
                return [gzidx_body(f.read())]
        return call

    key, op = spec["key"], spec["op"]
    starts = spec.get("starts", [])
    if tool == "obstore":
        import obstore
        from obstore.store import from_url
        store = lambda: from_url(f"s3://{BUCKET}")  # noqa: E731
        if op == "whole":
            return lambda: [obstore.get(store(), key).bytes()]
        if op == "ranges_loop":
            def call():
                s = store()
                return [obstore.get_range(s, key, start=o, length=RANGE_BYTES) for o in starts]
            return call
        if op == "ranges_concurrent":
            return lambda: obstore.get_ranges(store(), key, starts=starts,
                                              lengths=[RANGE_BYTES] * len(starts))
    if tool == "s3fs":
        import s3fs
        path = f"{BUCKET}/{key}"
        if op == "whole":
            return lambda: [s3fs.S3FileSystem().cat_file(path)]
        if op == "ranges_loop":
            def call():
                fs = s3fs.S3FileSystem()
                return [fs.cat_file(path, start=o, end=o + RANGE_BYTES) for o in starts]
            return call
        if op == "ranges_concurrent":
            return lambda: s3fs.S3FileSystem().cat_ranges(
                [path] * len(starts), starts, [o + RANGE_BYTES for o in starts])
        if op == "ranges_file":
            def call():
                out = []
                with s3fs.S3FileSystem().open(path, "rb") as f:
                    for o in starts:
                        f.seek(o)
                        out.append(f.read(RANGE_BYTES))
                return out
            return call
    raise ValueError(f"no measurement {case}/{tool}/{spec.get('op')}")


def gzidx_body(blob):
    """A GZIDX index less voxpipe's trailer (which keys it to one file or object: its size, mtime
    and last 64 KiB): its header, points and windows, which an index of the same bytes built
    from a file or from an object share."""
    at = blob.rfind(b"VPKEY")
    return blob[:at] if blob[:5] == b"GZIDX" and at > 0 else blob


def measure(spec):
    """One measurement in this (child) process: its first call, and its warm one where asked."""
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    call = make_call(spec)
    warmup = spec.get("warmup")
    if warmup:  # one untimed read first (bench_monai.py's convention for loops over files)
        make_call(dict(spec, urls=[warmup]))()
    res = {}
    for name in ("first", "warm")[:2 if spec.get("warm") else 1]:
        c0 = counters(endpoint)
        out, seconds, peak_mib = measured(call)
        c1 = counters(endpoint)
        res[name] = {"seconds": seconds, "peak_mib": peak_mib,
                     **{k: c1[k] - c0[k] for k in ("requests", "bytes", "body_bytes", "GET",
                                                   "HEAD", "ranged_GET")}}
        if name == "first":  # the many-files loops return their results' CRCs, not the results
            res["crc"] = out if spec["case"] == "many" else crc(out)
            res["nbytes"] = (None if spec["case"] == "many"
                             else sum(memoryview(a).nbytes for a in out))
        del out
    return res


def child(spec):
    if spec.get("fill_cache"):
        return fill_cache(spec)
    return probe_iter_load(spec) if spec.get("probe") else measure(spec)


def fill_cache(spec):
    """Writes the index of the object into the shared index cache, as ``vp.gz.build_index(url,
    cache=True)`` leaves it there. A read does not: it reads a sidecar that has a table of
    contents by ranges, keeping nothing (docs/gzip.md)."""
    os.environ["VOXPIPE_CACHE_DIR"] = INDEX_CACHE
    import voxpipe as vp
    vp.gz.build_index(spec["urls"][0], cache=True)
    return None


def probe_iter_load(spec):
    """Whether vp.iter_load reads URLs: the error it raises on one, or None."""
    import voxpipe as vp
    try:
        for _ in vp.iter_load(spec["urls"][:1]):
            pass
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------------------------
# Parent.
# --------------------------------------------------------------------------------------------

def run_case(name, rows, repeat, log):
    """rows: [(label, spec)], interleaved (benchlib.interleaved), memory primed before each."""
    runs = {label: [] for label, _ in rows}
    for r, label, spec in interleaved(rows, repeat):
        prime_memory(PRIME_MIB[name])
        res = try_child(__file__, dict(spec, case=name))
        runs[label].append(res)
        log(run_log(r, repeat, label, res,
                    lambda x: f", {x['requests']} req, {x['bytes'] / 1e6:.1f} MB"))
    out = summarise_rows(runs, ("requests", "bytes", "body_bytes", "GET", "HEAD", "ranged_GET",
                                "peak_mib"))
    for label, s in out.items():
        ok = [x for x in runs[label] if "error" not in x]
        if ok:
            s["crc"], s["nbytes"] = ok[0]["crc"], ok[0]["nbytes"]
    return out


def has_table_of_contents(index):
    """Whether the index file ends with voxpipe's version-2 trailer (its table of contents, which
    a sidecar in a bucket is read by; src/gz/index_file.cpp): one written before it is rebuilt."""
    with open(index, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 8:
            return False
        f.seek(size - 8)
        length = int.from_bytes(f.read(4), "little")
        if not 6 <= length <= size:
            return False
        f.seek(size - length)
        return f.read(6) == b"VPKEY\x02"


def stage(gz, folder, log):
    """`folder`/NAME.nii.gz, a hard link to `gz` (a copy where links fail), and its exact seek
    index next to it, as the series is uploaded: the sidecar never lies beside the input the
    other cases (and benchmarks) read, so their .nii.gz stays a plain single-stream file.
    Returns (path, index path)."""
    import voxpipe as vp
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, os.path.basename(gz))
    if not os.path.exists(path) or not os.path.samefile(path, gz):
        if os.path.exists(path):
            os.remove(path)
        try:
            os.link(gz, path)
        except OSError:
            shutil.copyfile(gz, path)
    index = path + ".gzidx"
    if not os.path.exists(index) or os.path.getmtime(index) < os.path.getmtime(gz) \
            or not has_table_of_contents(index):
        log(f"building the seek index {index} ...")
        vp.gz.build_index(path)
    return path, index


def client_environment(endpoint):
    """The environment the clients are configured by, as users' code is: the server's endpoint
    over plain HTTP, dummy keys and a region. The user's own AWS profile settings are dropped
    from os.environ, so that none of them reaches a client."""
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        os.environ.pop(k, None)
    return dict(AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true", AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
                AWS_DEFAULT_REGION="us-east-1")


def upload(endpoint, objects, log):
    """Create the bucket and put every (key, local path or bytes) into it, with boto3."""
    import boto3
    t0 = time.perf_counter()
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    total = 0
    for key, body in objects:
        if not isinstance(body, bytes):
            with open(body, "rb") as f:
                body = f.read()
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
        total += len(body)
    log(f"uploaded {len(objects)} objects, {total / 1e6:.0f} MB, "
        f"in {time.perf_counter() - t0:.1f} s")


def main():
    ap = Parser(__doc__, repeat=3, wait_idle=True,
                quick="smoke test: 1 repeat, 8 files, report to bench/data/BENCHMARKS-quick.md "
                      "unless --output")
    ap.add_argument("--files", type=int, default=40, help="T1-size files in case 3 (default 40)")
    ap.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse(child)
    if args.server:
        serve()
        return
    if args.quick:
        args.repeat, args.files = 1, min(args.files, 8)
    output = args.output
    if not os.path.exists(SERIES):
        sys.exit(f"missing {SERIES}: run .venv/bin/python bench/make_data.py first")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    import bench_monai  # makes bench_many.py's files, and t1_3d.nii when missing
    import nibabel as nib
    import numpy as np
    t1_paths = bench_monai.make_inputs(args.files)
    series, index = stage(SERIES, STAGE, log)
    shape = nib.load(series).shape
    t_mid = shape[3] // 2
    rng = np.random.default_rng(20261204)
    raw = rng.bytes(RAW_BYTES)
    starts = [int(x) for x in rng.integers(0, RAW_BYTES - RANGE_BYTES, N_RANGES)]

    settle(args)
    server = Server()
    os.environ.update(client_environment(server.endpoint))
    many_keys = [f"many/{os.path.basename(p)}" for p in t1_paths]
    try:
        upload(server.endpoint, [(SERIES_KEY, series), (SERIES_KEY + ".gzidx", index),
                                 (RAW_KEY, raw)] + list(zip(many_keys, t1_paths)), log)
        del raw
        started, cpu0 = time.time(), cpu_snapshot()  # the measurements, uploads excluded
        series_url = f"s3://{BUCKET}/{SERIES_KEY}"
        many_urls = [f"s3://{BUCKET}/{k}" for k in many_keys]
        raw_spec = {"key": RAW_KEY, "starts": starts}
        cases = {
            "volume": [("nibabel", {"tool": "nibabel", "urls": [series_url], "t": t_mid,
                                    "warm": True}),
                       ("voxpipe", {"tool": "voxpipe", "urls": [series_url], "t": t_mid,
                                    "warm": True, "cache": "shared"}),
                       ("voxpipe_cold", {"tool": "voxpipe", "urls": [series_url], "t": t_mid,
                                         "warm": True, "cache": "cold"})],
            "series": [("nibabel", {"tool": "nibabel", "urls": [series_url]}),
                       ("voxpipe", {"tool": "voxpipe", "urls": [series_url]}),
                       ("voxpipe_local", {"tool": "voxpipe_local", "urls": [series]})],
            "many": [(tool, {"tool": tool, "urls": many_urls, "warmup": many_urls[0]})
                     for tool in ("nibabel", "voxpipe")],
            "raw": [(f"{tool} {op}", dict(raw_spec, tool=tool, op=op, warm=True))
                    for op in ("whole", "ranges_loop", "ranges_concurrent")
                    for tool in ("obstore", "s3fs")]
            + [("s3fs ranges_file", dict(raw_spec, tool="s3fs", op="ranges_file", warm=True))],
            "index": [("read_int16", {"tool": "voxpipe", "urls": [series_url], "op": "int16",
                                      "cache": "cold"}),
                      ("read_f32", {"tool": "voxpipe", "urls": [series_url], "cache": "cold"}),
                      ("exact", {"tool": "build_index", "urls": [series_url], "exact": True,
                                 "cache": "cold"}),
                      ("fast", {"tool": "build_index", "urls": [series_url], "exact": False,
                                "cache": "cold"}),
                      ("local_exact", {"tool": "build_index", "urls": [series], "exact": True,
                                       "cache": "cold"})],
        }
        iter_load_note = try_child(__file__, {"probe": True, "urls": many_urls})
        # The index of this version of the series in the shared cache.
        shutil.rmtree(INDEX_CACHE, ignore_errors=True)
        try_child(__file__, {"fill_cache": True, "urls": [series_url]})
        if isinstance(iter_load_note, dict):
            iter_load_note = iter_load_note["error"]
        if iter_load_note is None:
            cases["many"].append(("iter_load", {"tool": "iter_load", "urls": many_urls,
                                                "warmup": many_urls[0]}))
        res = {}
        for name, rows in cases.items():
            log(f"case {name}")
            res[name] = run_case(name, rows, args.repeat, log)
    finally:
        server.stop()
    cpu1 = cpu_snapshot()
    with open(index, "rb") as f:
        staged_index_crc = crc([gzidx_body(f.read())])
    facts = dict(shape=shape, t=t_mid, series_bytes=os.path.getsize(series),
                 index_bytes=os.path.getsize(index), staged_index_crc=staged_index_crc,
                 files=len(t1_paths),
                 many_bytes=sum(os.path.getsize(p) for p in t1_paths),
                 iter_load_note=iter_load_note, elapsed=time.time() - started)
    publish(output, render(args, res, facts, (cpu0, cpu1)), BEGIN, END)
    log(f"wrote {output}")


# --------------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------------

def verdict(x, ok):
    return "not measured" if x is None else ("met" if ok else "**not met**")


def render(args, res, facts, cpu):
    import numpy as np
    L = []
    w = L.append
    cmd = command()
    errors = []

    def get(case, label, key="first"):
        x = res[case].get(label)
        return x.get(key) if x else None

    def row_error(case, label):
        x = res[case][label]
        if x["error"]:
            errors.append((case, label, x["error"]))
        return x["error"] if not x.get("first") else None

    w(BEGIN)
    w("")
    w("## Object storage (S3): bench/bench_remote.py")
    w("")
    w(f"{stamp()}; `{cmd}`"
      + (" (**--quick smoke test: not for quoting**)" if args.quick else "") + "; "
      f"median (min) of {args.repeat} fresh process(es) per row, rows interleaved, memory primed "
      f"before each; the measurements took {facts['elapsed']:.0f} s. "
      + versions_text(VERSIONED) + ".")
    w("")
    w("- Server: moto's S3 in its own process on 127.0.0.1 (plain HTTP, keep-alive), sharing the "
      f"{os.cpu_count()} cores with the client. Loopback adds no latency: few large requests and "
      "many small ones cost about the same here, unlike on a real network. moto reads an "
      "object's whole stored value for every GET, ranged or not, before slicing it; the server "
      "process here keeps each value in memory once, so a request costs it what it sends.")
    w("- Requests and bytes are counted by the server: MB = bytes it sent (status line, headers "
      "and body), medians over the runs. The clients are configured by the environment "
      "(`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP=true`, keys, region), as users' code is.")
    w("- nibabel + s3fs: `fs = s3fs.S3FileSystem()`, `fs.open(url)`, `gzip.GzipFile` over it in a "
      "`nib.FileHolder`, `Nifti1Image.from_file_map` (how users read a remote .nii.gz today; "
      "s3fs's defaults: `readahead` cache, 50 MiB blocks). voxpipe: `vp.load(url)`. Both make "
      "their client inside the timed call, as a script does; **first** = the first call in a "
      "fresh process, **warm** = the same call again in that process.")
    w("- " + other_work_sentence(other_work(*cpu), "this benchmark, server included,"))
    w("")
    targets = []
    shape, t = facts["shape"], facts["t"]
    shape_s = "x".join(map(str, shape))

    # 1. One volume.
    w(f"### 1. One volume from the middle: `dataobj[..., {t}]` of bold_4d.nii.gz\n")
    w(f"{shape_s} int16, gzip -6, {facts['series_bytes'] / 1e6:.0f} MB; its seek index "
      f"(`vp.gz.build_index`, exact, a point per volume; {facts['index_bytes'] / 1e6:.1f} MB) lies "
      "next to it in the bucket as `bold_4d.nii.gz.gzidx`. One volume is "
      f"{int(np.prod(shape[:3])) * 2:,} bytes of int16, about "
      f"{facts['series_bytes'] / shape[3] / 1e6:.2f} MB compressed.\n")
    w("| reader | first | warm | requests (first) | MB sent (first) | MB sent (warm) | peak RSS |")
    w("|---|---|---|---|---|---|---|")
    for label, name in (("nibabel", "nibabel + s3fs"),
                        ("voxpipe", "voxpipe `vp.load(url)`, index in the local cache "
                                    "(`vp.gz.build_index(url, cache=True)`)"),
                        ("voxpipe_cold", "voxpipe `vp.load(url)`, index read by ranges from the "
                                         "bucket")):
        e = row_error("volume", label)
        if e:
            w(f"| {name} | error: `{e['error']}` | | | | | |")
            continue
        f, wm = get("volume", label), get("volume", label, "warm")
        w(f"| {name} | {fmt_t(f)} | {fmt_t(wm)} | {f['requests']:.0f} | {fmt_mb(f['bytes'])} | "
          f"{fmt_mb(wm['bytes']) if wm else 'n/a'} | {f['peak_mib']:.0f} MiB |")
    n, v = get("volume", "nibabel"), get("volume", "voxpipe")
    sp = ratio(n and n["median"], v and v["median"])
    less = ratio(n and n["bytes"], v and v["bytes"])
    c = get("volume", "voxpipe_cold")
    sp_cold = ratio(n and n["median"], c and c["median"])
    less_cold = ratio(n and n["bytes"], c and c["bytes"])
    w("")
    w(f"With the index fetched from the bucket (the first read of this object on a machine): "
      f"time {fmt_x(sp_cold)}, bytes sent {fmt_x(less_cold)}: the sidecar (a 32 KiB window per "
      "volume) is read by ranges: its last 64 KiB (its table of contents), then the window of "
      "the volume's seek point, fetched alongside the volume's data and the object's tail.\n")
    w(f"nibabel + s3fs / voxpipe (first call): time {fmt_x(sp)}, bytes sent {fmt_x(less)} "
      "(above 1: voxpipe is faster, and is sent fewer bytes).\n")
    targets.append(("one volume: >= 20x faster than nibabel + s3fs (first)", fmt_x(sp),
                    verdict(sp, sp is not None and sp >= 20)))
    targets.append(("one volume: >= 50x less data than nibabel + s3fs (first)", fmt_x(less),
                    verdict(less, less is not None and less >= 50)))
    targets.append(("one volume, index in the bucket only: >= 20x faster than nibabel + s3fs "
                    "(first)", fmt_x(sp_cold), verdict(sp_cold, sp_cold is not None and sp_cold >= 20)))
    targets.append(("one volume, index in the bucket only: >= 50x less data than nibabel + "
                    "s3fs (first)", fmt_x(less_cold),
                    verdict(less_cold, less_cold is not None and less_cold >= 50)))

    # 2. Whole series.
    out_bytes = int(np.prod(shape)) * 4
    w("### 2. The whole series to float32: `get_fdata(dtype=np.float32)`\n")
    w(f"Output {out_bytes / MIB:.0f} MiB. Local disk: the same file and sidecar index in "
      "bench/data/remote/, from a warm page cache. Peak RSS: growth during the call.\n")
    w("| reader | time | requests | MB sent | MB/s of output | peak RSS |")
    w("|---|---|---|---|---|---|")
    for label, name in (("nibabel", "nibabel + s3fs"), ("voxpipe", "voxpipe `vp.load(url)`"),
                        ("voxpipe_local", "voxpipe `vp.load(path)`, local disk")):
        e = row_error("series", label)
        if e:
            w(f"| {name} | error: `{e['error']}` | | | | |")
            continue
        f = get("series", label)
        w(f"| {name} | {fmt_t(f)} | {f['requests']:.0f} | {fmt_mb(f['bytes'])} | "
          f"{out_bytes / 1e6 / f['median']:.0f} | {f['peak_mib']:.0f} MiB |")
    n, v, loc = get("series", "nibabel"), get("series", "voxpipe"), get("series", "voxpipe_local")
    sp = ratio(n and n["median"], v and v["median"])
    frac = ratio(loc and loc["median"], v and v["median"])
    w("")
    w(f"voxpipe from S3 vs nibabel + s3fs: {fmt_x(sp)}; voxpipe from S3 runs at "
      f"**{'n/a' if frac is None else f'{100 * frac:.0f}%'}** of its speed on local disk.\n")
    targets.append(("whole series from S3 >= 80% of voxpipe's local speed",
                    "n/a" if frac is None else f"{100 * frac:.0f}%",
                    verdict(frac, frac is not None and frac >= 0.8)))

    # 3. Many files.
    nf = facts["files"]
    w(f"### 3. {nf} T1-size files to float32\n")
    w(f"bench_many.py's files (256x256x176 int16 saved by nibabel, gzip level 1, "
      f"{facts['many_bytes'] / nf / 1e6:.1f} MB each). One untimed read of the first file, then "
      "all of them timed in a loop in one process; each result is dropped after use.\n")
    w("| reader | total | per file | files/s | requests | MB sent | peak RSS | vs nibabel + s3fs |")
    w("|---|---|---|---|---|---|---|---|")
    nt = get("many", "nibabel")
    for label, name in (("nibabel", "nibabel + s3fs loop"),
                        ("voxpipe", "voxpipe `vp.load(url)` loop"),
                        ("iter_load", "voxpipe `vp.iter_load(urls)`")):
        if label not in res["many"]:
            w(f"| {name} | skipped: `vp.iter_load` does not read URLs yet "
              f"(`{facts['iter_load_note']}`) | | | | | | |")
            continue
        e = row_error("many", label)
        if e:
            w(f"| {name} | error: `{e['error']}` | | | | | | |")
            continue
        f = get("many", label)
        x = ratio(nt and nt["median"], f["median"])
        w(f"| {name} | {fmt_t(f)} | {fmt_s(f['median'] / nf)} | {nf / f['median']:.1f} | "
          f"{f['requests']:.0f} | {fmt_mb(f['bytes'])} | {f['peak_mib']:.0f} MiB | {fmt_x(x)} |")
        if label != "nibabel":
            targets.append((f"{nf} T1 files: {name} vs nibabel + s3fs loop (no target set)",
                            fmt_x(x), "info"))
    w("")

    # 4. obstore vs s3fs.
    w(f"### 4. obstore vs s3fs: one {RAW_BYTES // MIB} MiB object\n")
    w(f"{N_RANGES} ranges of {RANGE_BYTES // 1024} KiB at fixed random offsets. One after "
      "another: `obstore.get_range` / `fs.cat_file(path, start, end)` in a loop; concurrent: "
      f"one `obstore.get_ranges` (which merges ranges less than 1 MiB apart) / one "
      "`fs.cat_ranges`; file object: `fs.open(path)`, then `seek` + `read` per range.\n")
    w("| operation | client | first | warm | requests | MB sent | s3fs / obstore (first, warm) |")
    w("|---|---|---|---|---|---|---|")
    ops = (("whole", "whole object"), ("ranges_loop", f"{N_RANGES} ranges, one after another"),
           ("ranges_concurrent", f"{N_RANGES} ranges, one concurrent call"),
           ("ranges_file", f"{N_RANGES} ranges through a file object"))
    for op, what in ops:
        for tool in ("obstore", "s3fs"):
            label = f"{tool} {op}"
            if label not in res["raw"]:
                continue
            e = row_error("raw", label)
            if e:
                w(f"| {what} | {tool} | error: `{e['error']}` | | | | |")
                continue
            f, wm = get("raw", label), get("raw", label, "warm")
            o, ow = get("raw", f"obstore {op}"), get("raw", f"obstore {op}", "warm")
            rel = (f"{fmt_x(ratio(f['median'], o['median']))}, "
                   f"{fmt_x(ratio(wm['median'], ow['median']))}"
                   if tool == "s3fs" and o and ow else "")
            w(f"| {what} | {tool} | {fmt_t(f)} | {fmt_t(wm)} | {f['requests']:.0f} | "
              f"{fmt_mb(f['bytes'])} | {rel} |")
    w("")
    rel = [ratio(get("raw", f"s3fs {op}", k) and get("raw", f"s3fs {op}", k)["median"],
                 get("raw", f"obstore {op}", k) and get("raw", f"obstore {op}", k)["median"])
           for op, _ in ops[:3] for k in ("first", "warm")]
    rel = [x for x in rel if x is not None]
    if rel:
        faster = sum(x > 1 for x in rel)
        summary = (f"obstore faster in {faster} of {len(rel)} (operation, first/warm) pairs; "
                   f"s3fs / obstore {min(rel):.2f}x to {max(rel):.2f}x")
        w(f"{summary}.\n")
        targets.append(("obstore vs s3fs, the same operations (issue 20 point 5: choose by "
                        "measurement)", summary, "info"))

    # 5. Seek index of the object.
    w("### 5. The seek index of the object: `vp.gz.build_index(url)` against a whole read\n")
    w(f"The series object of 1. and 2. ({facts['series_bytes'] / 1e6:.0f} MB). "
      "`vp.gz.build_index(url, output=FILE)` (the index to a local file, so that the sidecar "
      "next to the object stays as the other cases read it; the default writes it next to the "
      "object with one PUT more), exact (a point per volume, placed as one front-to-back "
      "inflate places them: one pass of voxpipe's decoder, on one thread for an object read with "
      "fewer than 3 threads, else in chunks decoded ahead on all of them) and `exact=False` (the points of "
      "one parallel inflate), against a whole read of the same "
      "object in the same run: `np.asanyarray(vp.load(url).dataobj)` (int16, as stored) and "
      "`vp.load(url).get_fdata(dtype=np.float32)`. Every row starts with an empty local index "
      "cache (the whole reads find the sidecar in the bucket). The build reads the object ahead "
      "in 8 MiB parts, up to 8 in flight and 64 MiB ahead of its decoders, as the whole read "
      "does.\n")
    w("| operation | time | requests | MB sent | peak RSS | / whole read (int16) | "
      "/ `get_fdata` (float32) |")
    w("|---|---|---|---|---|---|---|")
    r16, r32 = get("index", "read_int16"), get("index", "read_f32")
    for label, name in (("read_int16", "whole read, int16 `dataobj`"),
                        ("read_f32", "whole read, `get_fdata(dtype=np.float32)`"),
                        ("exact", "`vp.gz.build_index(url)`, exact"),
                        ("fast", "`vp.gz.build_index(url, exact=False)`"),
                        ("local_exact", "`vp.gz.build_index(path)`, exact, the same file on "
                                        "local disk")):
        e = row_error("index", label)
        if e:
            w(f"| {name} | error: `{e['error']}` | | | | | |")
            continue
        f = get("index", label)
        w(f"| {name} | {fmt_t(f)} | {f['requests']:.0f} | {fmt_mb(f['bytes'])} | "
          f"{f['peak_mib']:.0f} MiB | {fmt_x(ratio(f['median'], r16 and r16['median']))} | "
          f"{fmt_x(ratio(f['median'], r32 and r32['median']))} |")
    w("")
    ex, loc = get("index", "exact"), get("index", "local_exact")
    x = ratio(ex and ex["median"], loc and loc["median"])
    w(f"The exact build from the object / the same build from local disk: {fmt_x(x)} "
      f"({os.cpu_count()} cores here). The parallel exact build inflates the data twice (a "
      "parallel inflate finds where spans start, then the spans are inflated again to place "
      "every point exactly); over a network, with fewer than 3 threads, the one front-to-back "
      "inflate of the sequential build costs less, and is used. Either reads the object once "
      "(the parallel build's second pass reads the read cache, up to 256 MiB of object). "
      "`exact=False` inflates once, in parallel.\n")
    for label, name in (("exact", "exact"), ("fast", "exact=False")):
        f = get("index", label)
        x = ratio(f and f["median"], r32 and r32["median"])
        targets.append((f"`build_index(url)` ({name}) <= 1.5x the time of a whole read "
                        "(`get_fdata`)", fmt_x(x), verdict(x, x is not None and x <= 1.5)))
        x16 = ratio(f and f["median"], r16 and r16["median"])
        targets.append((f"`build_index(url)` ({name}) / whole int16 read (no target set)",
                        fmt_x(x16), "info"))

    L += targets_lines("### Targets", targets)

    w("### Agreement\n")
    checks = (("volume", "1. the volume", lambda label: ""),
              ("series", "2. the float32 series", lambda label: ""),
              ("many", "3. the float32 arrays (every 7th voxel), file by file", lambda label: ""),
              ("raw", "4. the whole object; the 100 ranges, in order",
               lambda label: label.endswith("whole")))
    for case, what, part in checks:
        groups = collections.defaultdict(list)
        for label, x in res[case].items():
            if x.get("crc") is not None:
                groups[json.dumps([part(label), x["crc"], x["nbytes"]])].append(label)
        same = len(groups) == len({json.loads(k)[0] for k in groups})
        w(f"- {what}: " + ("every reader returned the same bytes (CRC-32)" if same else
                           "**readers differ**: " + "; ".join(
                               " = ".join(v) for v in groups.values())))
    built = (res["index"].get("exact") or {}).get("crc")
    w("- 5. the exact index built from the object: " + (
        "not built" if built is None else
        "equals the one built from the same file on local disk (header, points and windows; "
        "CRC-32)" if built == facts["staged_index_crc"] else
        "**differs from the one built from the same file on local disk**"))
    w("")
    L += errors_lines("### Errors", errors)
    w(END)
    w("")
    return "\n".join(L)


if __name__ == "__main__":
    main()
