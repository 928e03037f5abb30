// voxpipe/threads.hpp: how many threads a call runs on.
//
// Every thread count the public API takes (ReadOptions, WriteOptions, GzipIndexOptions,
// InterpOptions, SeriesResampleOptions, DicomScanOptions, DicomDecodeOptions, read_dicom_series,
// the device loads; the CLI's --threads and the Python package's threads=) is passed through
// resolve_threads once, when the call begins: 0 means the default below, any other value is
// used as given. The work inside the call then runs on that many threads of the process's pool.
#pragma once

namespace voxpipe {

// `requested` when it is not 0. For 0, the default, the first of:
//  1. $VOXPIPE_NUM_THREADS, when it is a positive integer;
//  2. $OMP_NUM_THREADS, when it is a positive integer or a comma-separated list of them (OpenMP's
//     per-level form "4,2": the first, the outermost level's), as Dask's nanny, joblib and job
//     schedulers set it for the processes they start;
//  3. the CPUs this thread may run on (sched_getaffinity: what taskset, numactl and a cgroup's
//     cpuset allow; a CPU quota such as `docker --cpus` is not seen), or
//     std::thread::hardware_concurrency() where that cannot be read; at least 1.
// A variable that is set to anything but a positive integer up to 65536 (empty, "abc", "0",
// "-2", "2.5", "1e3") is ignored, as if it were unset; spaces around the number are allowed.
// The environment is read on every call (two getenv calls), so a change made before a call
// applies to it. As with any getenv, changing the environment while another thread runs a voxpipe
// call is a data race: set the variables before starting threads. Never throws.
unsigned resolve_threads(unsigned requested) noexcept;

}  // namespace voxpipe
