#!/usr/bin/env python
"""`voxpipe convert` of a local .nii.gz series to an S3 bucket served on localhost, against the
same conversion to a local file or folder, in one run: a .nii.gz object (streamed into a
multipart upload as it is compressed) and a NIfTI-Zarr store (chunks uploaded as they are
encoded, root metadata last).

Writes the "remote write" section of BENCHMARKS.md (between its markers) and prints it.

The server: moto's S3 (``moto_server``) in its own process, on 127.0.0.1 over plain HTTP, on the
same cores as the client: moto receives, hashes and stores every byte in Python, so on a small
machine the server's own CPU time is part of every remote figure (a real bucket's is not).
Loopback has no latency: this measures what the client does, not a network.

Rows run as whole commands (``.venv/bin/voxpipe convert IN OUT --overwrite``), interleaved, the
order reversed every repeat: wall time median (min), and the command's peak RSS (``time -f
%M``). A command with a URL runs in Python (the package imported first: 0.5-1 s here); the
local .nii.gz row runs in the compiled command alone, and again as ``python -m voxpipe`` (the
same import) for a like-for-like figure; the local store row runs in Python too. Every object written is checked against the local output (the .nii.gz byte for
byte; the store through vp.load).

Usage: .venv/bin/python bench/bench_remote_write.py [--repeat N] [--output PATH]
Inputs: .venv/bin/python bench/make_data.py (bold_4d.nii.gz).
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (DATA, REPO, command, cpu_snapshot, other_work, other_work_sentence,
                      publish, stamp, versions_text)

BEGIN = "<!-- remote write benchmark: begin -->"
END = "<!-- remote write benchmark: end -->"
SERIES = os.path.join(DATA, "bold_4d.nii.gz")
BUCKET = "voxpipe-bench-write"
VOXPIPE = os.path.join(REPO, ".venv", "bin", "voxpipe")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server():
    import boto3
    port = free_port()
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                             "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench",
                          aws_secret_access_key="bench", region_name="us-east-1")
    for _ in range(200):
        try:
            client.create_bucket(Bucket=BUCKET)
            return proc, endpoint, client
        except Exception:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("moto_server did not start")


def process_cpu(pid):
    """CPU seconds (user + system) the process `pid` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args, env):
    # A row named "(in Python)" runs the command as a URL's runs: the package imported first.
    program = [sys.executable, "-m", "voxpipe"] if args[0] == "python" else [VOXPIPE]
    args = args[1:] if args[0] == "python" else args
    p = subprocess.run(["/usr/bin/time", "-f", "%e %M", *program, *args], env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"voxpipe {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    wall, rss = p.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss) * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--output", default=os.path.join(REPO, "BENCHMARKS.md"))
    args = ap.parse_args()
    if not os.path.exists(SERIES):
        raise SystemExit(f"{SERIES} is missing: run bench/make_data.py")
    proc, endpoint, client = start_server()
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true",
               AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
               AWS_DEFAULT_REGION="us-east-1", VOXPIPE_PYTHON=sys.executable)
    tmp = tempfile.mkdtemp(prefix="bench-remote-write-")
    rows = {
        "local .nii.gz": [SERIES, os.path.join(tmp, "o.nii.gz")],
        "local .nii.gz (in Python)": [SERIES, os.path.join(tmp, "p.nii.gz")],
        "s3 .nii.gz": [SERIES, f"s3://{BUCKET}/o.nii.gz"],
        "local .nii.zarr": [SERIES, os.path.join(tmp, "o.nii.zarr")],
        "s3 .nii.zarr": [SERIES, f"s3://{BUCKET}/o.nii.zarr"],
    }
    times = {k: [] for k in rows}
    before = cpu_snapshot()
    try:
        for r in range(args.repeat):
            order = list(rows.items())
            for name, io in (order if r % 2 == 0 else order[::-1]):
                prefix = ["python"] if "(in Python)" in name else []
                times[name].append(run([*prefix, "convert", *io, "--overwrite"], env))
        after = cpu_snapshot()
        local_gz = open(os.path.join(tmp, "o.nii.gz"), "rb").read()
        remote_gz = client.get_object(Bucket=BUCKET, Key="o.nii.gz")["Body"].read()
        assert remote_gz == local_gz, "the object differs from the local file"
        etag = client.head_object(Bucket=BUCKET, Key="o.nii.gz")["ETag"].strip('"')
        import numpy as np
        import voxpipe as vp
        so = {"endpoint": endpoint, "allow_http": True, "access_key_id": "bench",
              "secret_access_key": "bench", "region": "us-east-1"}
        a = vp.load(f"s3://{BUCKET}/o.nii.zarr", storage_options=so).dataobj[..., 150]
        b = vp.load(os.path.join(tmp, "o.nii.zarr")).dataobj[..., 150]
        assert np.array_equal(a, b), "the store differs from the local one"
        keys = sum(1 for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix="o.nii.zarr/") for _ in page.get("Contents", []))
        server_cpu = process_cpu(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(name):
        return statistics.median(w for w, _ in times[name])

    lines = [BEGIN, "## Writing to object storage (bench_remote_write.py)", "",
             f"{stamp()}; `{command()}`; {versions_text(('voxpipe', 'obstore', 'zarr', 'moto'))}.",
             f"`voxpipe convert` of `bench/data/bold_4d.nii.gz` (96x96x60x300 int16, "
             f"{os.path.getsize(SERIES) / 1e6:.0f} MB) to a local file or folder and to moto's S3 "
             f"on localhost (its own process, on the same cores); {args.repeat} runs each, "
             f"interleaved. The .nii.gz object is the local file byte for byte "
             f"({len(local_gz) / 1e6:.0f} MB, ETag `...-{etag.rsplit('-', 1)[-1]}`: a multipart "
             f"upload of that many 16 MiB parts, streamed, no local copy); the store "
             f"({keys} objects) reads back as the local one.", "",
             "| output | wall s, median (min) | peak RSS | vs local |", "|---|---|---|---|"]
    for name in rows:
        w = [x for x, _ in times[name]]
        rss = max(m for _, m in times[name])
        kind = name.split(" ")[1]
        vs = "" if not name.startswith("s3") else \
            f"{med('local ' + kind) / med(name):.0%} of local speed" + (
                f"; {med('local .nii.gz (in Python)') / med(name):.0%} of it in Python"
                if kind == ".nii.gz" else "")
        lines.append(f"| {name} | {statistics.median(w):.2f} ({min(w):.2f}) | "
                     f"{rss / 2**20:.0f} MiB | {vs} |")
    remote_runs = sum(len(times[n]) for n in rows if n.startswith("s3"))
    lines += ["", f"moto's server used {server_cpu:.0f} CPU-seconds for the {remote_runs} remote "
              f"conversions (about {server_cpu / max(remote_runs, 1):.1f} s each, on the "
              f"client's {os.cpu_count()} cores).",
              other_work_sentence(other_work(before, after)),
              "The issue's goal is at least 80% of the local conversion's speed; on this "
              "machine moto's own work (receiving, hashing and storing every byte in Python) "
              "shares the client's cores, and a command with a URL also imports the Python "
              "package.", END, ""]
    publish(args.output, "\n".join(lines), BEGIN, END)


if __name__ == "__main__":
    main()
