"""URLs among the inputs of the many-file loaders (iter_load, load_many, load_batch and
voxpipe.torch's VolumeDataset): each object is fetched whole in one GET (``_remote.fetch``) on
I/O threads of their own, ahead of the file workers that decode it, and decoded from memory
exactly as ``vp.load(url)`` decodes it.

Why threads of their own: a GET spends its time waiting on the network, not on a core (obstore
releases the GIL), so more of them are worth running at once than there are decode threads, and
the next objects arrive while the current ones are decoded. Local paths never come here.

Memory: the fetched bytes of an object are counted from the moment its GET ends until its
consumer releases it (the loaders release an object when they admit its decoded output, which
then counts the object's bytes too). A new GET starts only while fewer than ``ahead`` objects are
fetching or held, and, under a byte budget, only while the bytes held here plus those the
consumer reports are below it (or nothing is held here or by the consumer, so one object
always goes). An object's size is known only once its answer arrives, so the GETs already in
flight (at most ``fetches`` objects) can take the total past the budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from . import remote as _remote

if TYPE_CHECKING:  # typing.TypeAlias is Python 3.10+; the annotations are not evaluated
    from typing import TypeAlias

# GETs in flight at once when the caller does not say (io_threads): enough to hide a request's
# latency behind the others' transfers, few enough to stay polite to a store. 18 small objects
# behind 0.2 s of latency (the tests' slow HTTP server, 2 cores): 3.9 s with 1, 1.2 s with 4,
# 0.77 s with 8.
DEFAULT_FETCHES = 8

# A fetch's outcome: the object, or the error it raised (raised by take, in the consumer's order).
_Fetched: TypeAlias = Union[tuple[_remote.RemoteObject, None], tuple[None, BaseException]]


def prefetcher_for(sources: Sequence[str], positions: Sequence[int],
                   storage_options: Mapping[str, Any] | None,
                   io_threads: int | None, *, ahead: int, budget: int | None = None,
                   cond: threading.Condition | None = None,
                   held_elsewhere: Callable[[], int] = lambda: 0) -> Prefetcher | None:
    """A Prefetcher of the URLs at `positions` of `sources` (None when there are none), fetching
    ``io_threads`` objects at once (default DEFAULT_FETCHES) and holding at most that many plus
    `ahead` (the consumer's own look-ahead) fetched or fetching."""
    if not positions:
        return None
    fetches = DEFAULT_FETCHES if io_threads is None else max(1, int(io_threads))
    return Prefetcher(sources, positions, storage_options, fetches=fetches,
                      ahead=fetches + max(0, int(ahead)), budget=budget, cond=cond,
                      held_elsewhere=held_elsewhere)


class Prefetcher:
    """Fetches the objects at `positions` of `sources` in input order on up to `fetches` threads,
    ahead of ``take``, within ``ahead`` objects and the byte budget (see the module's notes).

    ``cond``: the condition of the consumer's own state, when it has one, so that one lock
    guards both and the consumer's notifications (bytes it gave back) wake the fetchers;
    ``held_elsewhere()`` (called with that lock held) is the bytes the consumer holds that count
    against ``budget``. Thread-safe; ``close()`` stops it (a GET in flight ends first, nothing new
    starts). Made and used in one process: its threads do not exist in a forked child.
    """

    def __init__(self, sources: Sequence[str], positions: Sequence[int],
                 storage_options: Mapping[str, Any] | None, *, fetches: int, ahead: int,
                 budget: int | None = None, cond: threading.Condition | None = None,
                 held_elsewhere: Callable[[], int] = lambda: 0):
        self._urls = [sources[i] for i in positions]
        self._slot = {i: k for k, i in enumerate(positions)}
        self._options = dict(storage_options) if storage_options else None
        self._ahead = max(1, int(ahead))
        self._budget = budget
        self._held_elsewhere = held_elsewhere
        self._cond = cond if cond is not None else threading.Condition()
        self._next = 0          # next object (by slot) to fetch
        self._started: set[int] = set()   # slots fetching or held, not released
        self._sizes: dict[int, int] = {}  # bytes of the slots fetched and not released
        self._results: dict[int, _Fetched] = {}  # fetched, not taken
        self._closed = False
        n = min(max(1, int(fetches)), len(self._urls))
        self._threads = [threading.Thread(target=self._run, name=f"voxpipe-fetch-{k}",
                                          daemon=True) for k in range(n)]
        for t in self._threads:
            t.start()

    def __contains__(self, i: int) -> bool:
        return i in self._slot

    def _room(self) -> bool:
        """Whether another GET may start now (the lock held)."""
        if len(self._started) >= self._ahead:
            return False
        if self._budget is None:
            return True
        held = sum(self._sizes.values()) + self._held_elsewhere()
        return held < self._budget or (not self._started and held == 0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._next < len(self._urls) and not self._room():
                    self._cond.wait()
                if self._closed or self._next >= len(self._urls):
                    return
                k = self._next
                self._next += 1
                self._started.add(k)
            try:
                result: _Fetched = (_remote.fetch(self._urls[k], self._options), None)
            except Exception as exc:  # noqa: BLE001 - raised by take(), in the consumer's order
                result = (None, exc)
            with self._cond:
                if self._closed:
                    return
                self._results[k] = result
                if result[0] is not None:
                    self._sizes[k] = result[0].size
                self._cond.notify_all()

    def take(self, i: int) -> _remote.RemoteObject:
        """The object at position `i` once fetched (waiting for it), or its fetch's error raised.
        Its bytes count against the budget until ``release(i)``."""
        k = self._slot[i]
        with self._cond:
            while k not in self._results and not self._closed:
                self._cond.wait()
            if self._closed:
                raise RuntimeError("the loader was closed")
            result = self._results.pop(k)
        if result[1] is not None:
            raise result[1]
        return result[0]

    def release(self, i: int) -> None:
        """Stop counting the object at position `i` (taken, or failed): its consumer accounts
        for it from now on, or dropped it."""
        k = self._slot[i]
        with self._cond:
            self._started.discard(k)
            self._sizes.pop(k, None)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._results.clear()
            self._sizes.clear()
            self._cond.notify_all()
