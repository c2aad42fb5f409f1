"""Fan-out with cancel: the one way burnin runs work on many nodes at once.

Like Fabric's GroupResult, every item's result comes back, failures beside successes:
`fn` must not raise, since one node's failure belongs in its own result, never in
another's. Interrupted (Ctrl-C, or SIGTERM turned into one) while it waits, it sets the
run's `cancel`, which every transport and launcher honours by killing its command,
starts nothing new, waits a bounded time for the running ones to end, and re-raises:
the run stops within seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait

CANCEL_WAIT_S = 20.0  # an interrupted run waits this long for its commands to be killed


def fan_out(items: Iterable, fn: Callable, limit: int,
            cancel: threading.Event | None = None) -> list:
    """fn(item) for every item, at most `limit` at once; results in item order."""
    items = list(items)
    if not items:
        return []
    pool = ThreadPoolExecutor(max_workers=max(1, min(limit, len(items))),
                              thread_name_prefix="burnin-fanout")
    futures = [pool.submit(fn, item) for item in items]
    try:
        results = [f.result() for f in futures]
    except BaseException:
        if cancel is not None:
            cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        wait(futures, timeout=CANCEL_WAIT_S)
        raise
    pool.shutdown(wait=True)
    return results
