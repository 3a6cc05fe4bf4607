"""Audio decoded ahead of the transcriber, on a pool of threads.

The transcriber reads every recording forward in chunks (``iter_audio_chunks``). Decoded on
the transcriber's own thread, FLAC/MP3 decoding and resampling run in series with the engine,
one row after another. Here each row's chunk reader runs on a worker pool instead: rows are
opened ``depth`` rows before the transcriber starts them, and each keeps up to
``AHEAD_CHUNKS`` decoded chunks ready, so the transcriber finds its windows decoded. libsndfile
(soundfile, through cffi) and soxr release the GIL while they work, so the workers decode in
parallel with each other and with the model.

The manifest itself (record batches, the rows built from them) is read on a thread of its own
(``RowsAhead``) for the same reason.

What the transcriber sees does not change: a row's chunks arrive in order, and a decode error
is raised by the same ``next`` that would have raised it inline. A chunk whose decode has not
started when the transcriber needs it is decoded on the transcriber's thread (it does not
queue behind other rows' read-ahead).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from oasr.io import ManifestRow

# Chunks a row keeps decoded ahead of its reader: a recording of one window (the common case)
# is read whole, and whether a second chunk follows is known, in one task.
AHEAD_CHUNKS = 2
# Enough for ~10,000x real time of FLAC (one thread decodes ~1,600x on a loaded 2-core VM);
# more threads would only contend with the engine's thread for the GIL between C calls.
MAX_WORKERS = 8

_END = object()


class _Failure:
    """The exception a row's reader raised, kept in line with its chunks."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def default_workers(device_type: str = "cpu") -> int:
    """Decoding threads for a run on ``device_type``, from the process's CPU budget
    (affinity and cgroup quota, ``oasr.runtime_threads``): on the CPU, the cores torch's
    intra-op threads leave (at least 1); on a GPU, every core but one; at most
    ``MAX_WORKERS``."""
    from oasr.runtime_threads import decode_workers

    return min(MAX_WORKERS, decode_workers(device_type))


class ChunkReadAhead:
    """One recording's chunks, decoded on ``pool`` up to ``AHEAD_CHUNKS`` ahead of the reader.

    At most one task per recording is in flight, so its chunk generator never runs on two
    threads at once."""

    def __init__(self, open_chunks: Callable[[], Iterator[np.ndarray]],
                 pool: ThreadPoolExecutor) -> None:
        self._open = open_chunks
        self._chunks: Iterator[np.ndarray] | None = None  # opened on a worker (file I/O)
        self._pool = pool
        self._ready: deque[Any] = deque()
        self._done = False  # the reader ended or failed: nothing more to pull
        self._pending: Future[list[Any]] | None = pool.submit(self._pull)

    def _pull(self) -> list[Any]:
        """Up to ``AHEAD_CHUNKS`` chunks; ``_END`` after the last, a ``_Failure`` for an error."""
        out: list[Any] = []
        try:
            if self._chunks is None:
                self._chunks = self._open()
            while len(out) < AHEAD_CHUNKS:
                chunk = next(self._chunks, _END)
                out.append(chunk)
                if chunk is _END:
                    break
        except Exception as exc:  # delivered to the reader, in order, by __next__
            out.append(_Failure(exc))
        return out

    def _collect(self) -> None:
        future, self._pending = self._pending, None
        assert future is not None
        # Not started yet (queued behind other rows): decode it here rather than wait.
        items = self._pull() if future.cancel() else future.result()
        if items and (items[-1] is _END or isinstance(items[-1], _Failure)):
            self._done = True
        self._ready.extend(items)

    def __iter__(self) -> ChunkReadAhead:
        return self

    def __next__(self) -> np.ndarray:
        if not self._ready:
            if self._pending is None:
                if self._done:
                    raise StopIteration
                self._pending = self._pool.submit(self._pull)
            self._collect()
        item = self._ready.popleft()
        if item is _END:
            raise StopIteration
        if isinstance(item, _Failure):
            raise item.exc
        if self._pending is None and not self._done and len(self._ready) < AHEAD_CHUNKS:
            self._pending = self._pool.submit(self._pull)
        return item

    def cancel(self) -> None:
        """Drop the read-ahead of a row nobody will read (a queued task is not started)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        self._done = True
        self._ready.clear()


class RowsAhead:
    """A row source read on a thread of its own, up to ``depth`` rows ahead, in order: the
    manifest's record batches (pyarrow releases the GIL) and the rows built from them, off the
    thread that drives the engine. An exception of the source is raised by the ``next`` that
    reaches it, after the rows read before it."""

    def __init__(self, rows: Iterator[ManifestRow], depth: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._ended = False
        self._thread = threading.Thread(target=self._read, args=(rows,), daemon=True,
                                        name="oasr-manifest")
        self._thread.start()

    def _read(self, rows: Iterator[ManifestRow]) -> None:
        try:
            for row in rows:
                if not self._put(row):
                    return
            self._put(_END)
        except Exception as exc:  # delivered in order by __next__
            self._put(_Failure(exc))

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> RowsAhead:
        return self

    def __next__(self) -> ManifestRow:
        if self._ended:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._ended = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._ended = True
            raise item.exc
        return item

    def close(self) -> None:
        """Stop reading (the thread ends at its next row)."""
        self._stop.set()


class AudioPrefetch:
    """Opens rows ``depth`` ahead of their use, each a :class:`ChunkReadAhead` on one pool."""

    def __init__(self, workers: int, depth: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.depth = max(1, depth)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oasr-audio")
        self._opened: dict[str, ChunkReadAhead] = {}
        self._source: RowsAhead | None = None

    def rows(self, rows: Iterator[ManifestRow],
             open_chunks: Callable[[ManifestRow], Iterator[np.ndarray]]
             ) -> Iterator[ManifestRow]:
        """``rows``, unchanged and in order, each opened ``depth`` rows before it is yielded
        (rows with ``error`` set are not opened). An exception of ``rows`` itself (a manifest
        error) is raised after the rows read before it, where it would have been met."""
        held: deque[ManifestRow] = deque()
        source = self._source = RowsAhead(rows, self.depth)
        failure: Exception | None = None
        while True:
            while failure is None and len(held) < self.depth:
                try:
                    row = next(source)
                except StopIteration:
                    break
                except Exception as exc:
                    failure = exc
                    break
                if not row.error:
                    self._opened[row.id] = ChunkReadAhead(
                        lambda row=row: open_chunks(row), self.pool)
                held.append(row)
            if held:
                yield held.popleft()
            elif failure is not None:
                raise failure
            else:
                return

    def take(self, row: ManifestRow) -> ChunkReadAhead | None:
        """The opened reader of ``row`` (once), None when it was not opened here."""
        return self._opened.pop(row.id, None)

    def close(self) -> None:
        """Cancel the read-ahead nobody took and stop the pool without waiting on it."""
        if self._source is not None:
            self._source.close()
        for reader in self._opened.values():
            reader.cancel()
        self._opened.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
