"""The health probe a failed move runs on its two dirs must not call a healthy dir failed."""

from __future__ import annotations

import threading
from pathlib import Path

from mover.storage.dir_health import probe_log_dir


def test_concurrent_probes_of_a_healthy_dir_all_pass(tmp_path: Path) -> None:
    # Several moves failing at once (a full destination, a cancelled batch) probe the same dirs together; a probe
    # file shared between them would be unlinked under one another and read as a dead disk.
    verdicts: list[bool] = []
    lock = threading.Lock()

    def probe() -> None:
        mine = [probe_log_dir(tmp_path, write=True) is None for _ in range(300)]
        with lock:
            verdicts.extend(mine)

    threads = [threading.Thread(target=probe) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(verdicts) == 2400
    assert all(verdicts), f"{verdicts.count(False)} probes called a healthy dir failed"
    assert list(tmp_path.iterdir()) == [], "probes leave nothing behind"
