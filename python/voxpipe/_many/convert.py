"""Many-input jobs on a Dask cluster: ``vp.convert_many`` (each input saved as another format)
and ``vp.resample_many`` (each moving image resampled to one reference). docs/dask.md is the
user's guide.

A job runs as one task per input on the ``distributed.Client`` it is given (or here, one input
after another, without one), with the worker's thread budget as a ``to_dask`` task has it. Its
output name is the input's name without its image suffix, in one folder; inputs that would
write one output are refused before anything runs. A failure is reported as text in the
input's ConvertResult (nothing but the result crosses back from a worker) or raised naming the
input. Nothing here imports Dask: the client given is only called.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._sources import remote as _remote
from .._images.image import load, save
from .dask import absolute_path, task_threads
from .loading import note_path
from .._foundation.types import StrPath
from .._foundation.errors import InvalidArgumentError

if TYPE_CHECKING:
    import distributed

__all__ = ["ConvertResult", "convert_many", "resample_many"]

# What an input may be called, longest first: convert_many's outputs take the rest of the name.
_IMAGE_SUFFIXES = (".nii.gz", ".nii.zarr", ".hdr.gz", ".img.gz", ".nii", ".hdr", ".img", ".zarr")
_CONVERT_TO = ("nii", "nii.gz", "nii.zarr")

# A job: ``job(source, output, threads, *args)`` writes `output` from `source` (each job takes
# args of its own).
_Job = Callable[..., "ConvertResult"]


@dataclass(frozen=True)
class ConvertResult:
    """What ``convert_many`` did with one input: ``output`` the path written (None if it
    failed), ``error`` why it failed ("TruncatedError: ..."; None if it did not)."""

    input: str
    output: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def output_name(source: str, to: str) -> str:
    """The file name convert_many writes for `source`: its name without its image suffix
    (.nii.gz, .nii, .nii.zarr, .hdr/.img[.gz]), then ``.`` and `to`."""
    head = source.split("?", 1)[0] if _remote.is_url(source) else source
    base = head.rstrip("/" + os.sep).replace(os.sep, "/").rsplit("/", 1)[-1]
    low = base.lower()
    for suffix in _IMAGE_SUFFIXES:
        if low.endswith(suffix) and len(base) > len(suffix):
            base = base[:-len(suffix)]
            break
    return f"{base}.{to}"


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _convert_one(source: str, output: str, threads: int,
                 storage_options: Mapping[str, Any] | None,
                 save_options: Mapping[str, Any]) -> ConvertResult:
    """``vp.save(vp.load(source), output)``, both on `threads` threads."""
    options = storage_options if _remote.is_url(source) else None
    img = load(source, threads=threads, storage_options=options)
    save(img, output, threads=threads,
         storage_options=storage_options if _remote.is_url(output) else None, **save_options)
    return ConvertResult(source, output)


def _resample_one(source: str, output: str, threads: int, reference: Any, transforms: Any,
                  resample_options: Mapping[str, Any]) -> ConvertResult:
    """``vp.resample(source, reference, transforms, out=output)`` on `threads` threads."""
    from .resample_series import resample

    resample(source, reference, transforms, out=output, threads=threads or None,
             **resample_options)
    return ConvertResult(source, output)


def _job_task(job: _Job, source: str, output: str, threads: int | None, args: tuple[Any, ...],
              report: bool) -> ConvertResult:
    """One job on a worker, with the worker's thread budget; its failure returned as text
    when `report` (nothing but the result crosses back: no exception to pickle)."""
    try:
        return job(source, output, task_threads(threads), *args)
    except Exception as exc:
        if not report:
            raise
        return ConvertResult(source, None, _error_text(exc))


def _outputs_for(inputs: Iterable[StrPath], out_dir: StrPath,
                 to: str) -> tuple[list[str], list[str]]:
    """(absolute inputs, their outputs out_dir/NAME.TO), refusing an input that is its own
    output or two inputs with one output, before anything runs."""
    sources = [absolute_path(os.fspath(p)) for p in inputs]
    remote_out = _remote.is_url(os.fspath(out_dir))
    folder = os.fspath(out_dir).rstrip("/") if remote_out else os.path.abspath(os.fspath(out_dir))
    outputs = [f"{folder}/{output_name(s, to)}" if remote_out
               else os.path.join(folder, output_name(s, to)) for s in sources]
    writer: dict[str, str] = {}
    for source, output in zip(sources, outputs):
        if output == source:
            raise ValueError(f"{source}: writing it to {out_dir} would overwrite it")
        if output in writer:
            raise ValueError(f"{writer[output]} and {source} would both be written to {output}: "
                             "write them into different folders")
        writer[output] = source
    if not remote_out:
        os.makedirs(folder, exist_ok=True)
    return sources, outputs


def _run_jobs(job: _Job, sources: list[str], outputs: list[str], args: list[tuple[Any, ...]],
              threads: int | None, client: distributed.Client | None,
              errors: str) -> list[ConvertResult]:
    """``job(source, output, threads, *args[i])`` for every input: here one after another
    (each on `threads`, 0: every core), or one task per input on the client's cluster; each
    failure reported as a ConvertResult (errors="report") or raised naming its input."""
    if errors not in ("report", "raise"):
        raise ValueError(f"errors must be 'report' or 'raise', not {errors!r}")
    report = errors == "report"
    if client is None:
        results = []
        for i, (source, output) in enumerate(zip(sources, outputs)):
            try:
                results.append(job(source, output, threads or 0, *args[i]))
            except Exception as exc:
                if not report:
                    raise note_path(exc, source, i)
                results.append(ConvertResult(source, None, _error_text(exc)))
        return results
    futures = [client.submit(_job_task, job, source, output, threads, args[i], report,
                             key=f"voxpipe-{job.__name__.strip('_')}-{uuid.uuid4().hex}",
                             pure=False)
               for i, (source, output) in enumerate(zip(sources, outputs))]
    results = []
    try:
        for i, (source, future) in enumerate(zip(sources, futures)):
            try:
                results.append(future.result())
            except Exception as exc:  # the task raised, or its worker died (KilledWorker)
                if not report:
                    raise note_path(exc, source, i)
                results.append(ConvertResult(source, None, _error_text(exc)))
    finally:
        if len(results) < len(futures):
            # (distributed's Client.cancel is not annotated)
            client.cancel(futures[len(results):])  # type: ignore[no-untyped-call]
    return results


def convert_many(inputs: Iterable[StrPath], out_dir: StrPath, *,
                 to: Literal["nii", "nii.gz", "nii.zarr"] = "nii.gz",
                 client: distributed.Client | None = None,
                 errors: Literal["report", "raise"] = "report",
                 storage_options: Mapping[str, Any] | None = None,
                 **save_options: Any) -> list[ConvertResult]:
    """Convert every input (a .nii, .nii.gz, .hdr/.img or .nii.zarr path, or a URL of one) to
    ``out_dir/NAME.TO``, NAME its name without its image suffix (``sub-01_bold.nii.gz`` ->
    ``out_dir/sub-01_bold.nii.zarr`` with ``to="nii.zarr"``): ``vp.save(vp.load(input), output,
    **save_options)``, so each output equals the one a single ``vp.save`` writes.

    ``client``: a ``distributed.Client``: one task per input on its cluster, each with the
    worker's thread budget (``threads=`` in save_options: that many per conversion instead);
    the inputs and ``out_dir`` must be reachable from the workers (a shared filesystem, or
    URLs). None: here, one input after another, each on every core (``threads`` in all), so
    memory holds one image at a time.

    Returns one ConvertResult per input, in input order: ``output`` the path written, or
    ``error`` the failure's text ("TruncatedError: ... sub-03_bold.nii.gz ..."). A failing
    input writes nothing (outputs are written under a temporary name) and does not stop the
    others. ``errors="raise"``: the first failure (in input order) is raised instead, naming
    the input; here no input after it is converted, on a cluster the conversions not yet ended
    are cancelled. Two inputs that would write one output (the same name in two folders), or
    an input that is its own output, raise ValueError before anything is converted.
    ``storage_options``: for URL inputs and outputs, as ``vp.load``'s and ``vp.save``'s.
    ``out_dir`` may be a URL prefix (``s3://bucket/derived/``): each output is an object (or a
    store) that appears only once complete (``vp.save``; docs/remote.md, "Writing").
    """
    if to not in _CONVERT_TO:
        raise InvalidArgumentError(f"to: expected one of {', '.join(_CONVERT_TO)}, but received "
                                   f"{to!r}", field="to")
    if errors not in ("report", "raise"):
        raise ValueError(f"errors must be 'report' or 'raise', not {errors!r}")
    sources, outputs = _outputs_for(inputs, out_dir, to)
    threads = save_options.pop("threads", None)
    args = [(storage_options, save_options)] * len(sources)
    return _run_jobs(_convert_one, sources, outputs, args, threads, client, errors)


def resample_many(movings: Sequence[StrPath], reference: Any, transforms: Sequence[Any],
                  out_dir: StrPath, *, to: Literal["nii", "nii.gz"] = "nii.gz",
                  client: distributed.Client | None = None,
                  errors: Literal["report", "raise"] = "report",
                  **resample_options: Any) -> list[ConvertResult]:
    """``vp.resample(movings[i], reference, transforms[i], out=out_dir/NAME.TO)`` for every
    moving image (a path; NAME its name without its image suffix): each output is the file a
    single ``vp.resample`` writes, volume by volume in bounded memory.

    ``reference``: one grid for all (a path, or an image that pickles: ``vp.load``'s do).
    ``transforms``: one entry per moving image, each what ``vp.resample`` takes (a file name,
    a (4, 4) or (N, 4, 4) array, a chain as a list...). ``client``, ``errors``, ``threads`` and
    the results: as ``convert_many``. Other keywords go to ``vp.resample`` (``order``,
    ``mode``, ``dtype``, ``memory_limit``...).
    """
    if to not in ("nii", "nii.gz"):
        raise InvalidArgumentError(f"to: expected 'nii' or 'nii.gz', but received {to!r}",
                                   field="to")
    if errors not in ("report", "raise"):
        raise ValueError(f"errors must be 'report' or 'raise', not {errors!r}")
    movings = list(movings)
    transforms = list(transforms)
    if len(transforms) != len(movings):
        raise ValueError(f"resample_many takes one transform per moving image: {len(movings)} "
                         f"images, but {len(transforms)} transforms")
    if isinstance(reference, (str, os.PathLike)):
        reference = absolute_path(os.fspath(reference))
    sources, outputs = _outputs_for(movings, out_dir, to)
    threads = resample_options.pop("threads", None)
    args = [(reference, t, resample_options) for t in transforms]
    return _run_jobs(_resample_one, sources, outputs, args, threads, client, errors)
