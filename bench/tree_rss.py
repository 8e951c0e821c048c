"""Peak resident memory of a process and everything it started, sampled (the pack benches)."""

from __future__ import annotations

import threading

import psutil


class TreeRss:
    """Peak summed RSS of a process and its descendants, sampled every ``every`` s."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.peak = 0
        self._process = psutil.Process(pid)
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                for process in [self._process, *self._process.children(recursive=True)]:
                    try:
                        total += process.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            self._stop.wait(self._every)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak
