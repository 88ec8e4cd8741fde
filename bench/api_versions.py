"""ApiVersions round trips per second on one connection to a real moverd, against kafka-python's own cost.

The server side: a real moverd process, one blocking client socket, N sequential ApiVersions v3 requests (each
waits for its answer): round trips per second. The anchor: kafka-python 3.0.12 encoding the same request and
decoding the same response bytes, in process, no network: the client-side CPU cost of one call. The ratio says
how much of a round trip a Python client spends in its own codec versus waiting for us.
Usage: python bench/api_versions.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402

from bench.common import bench_root  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.wire.messages import API_VERSIONS  # noqa: E402

VERSION = 3
BODY = {"client_software_name": "bench", "client_software_version": "1"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    args = ap.parse_args()
    root = bench_root()
    try:
        with Moverd(root) as d, RawClient(d.port) as c:
            request = c.request_bytes(API_VERSIONS, VERSION, BODY, corr=1)
            for _ in range(200):  # warm-up: connection, thread pool, caches
                c.send(request)
                response = c.recv_frame()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                c.send(request)
                response = c.recv_frame()
            ours = args.calls / (time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert response is not None
    t0 = time.perf_counter()
    for _ in range(args.calls):
        req = ApiVersionsRequest(client_software_name="bench", client_software_version="1", version=VERSION)
        req.with_header(correlation_id=1, client_id="test")  # sets the header in place
        req.encode(header=True, framed=True)
        ApiVersionsResponse.decode(response, version=VERSION, header=True)
    theirs = args.calls / (time.perf_counter() - t0)
    print(f"ApiVersions v{VERSION}, {args.calls} sequential calls on one connection")
    print(f"moverd round trips: {ours:,.0f}/s ({1e6 / ours:.1f} us each)")
    print(f"kafka-python encode request + decode response, no network: {theirs:,.0f}/s ({1e6 / theirs:.1f} us each)")
    print(f"ratio round trip / kafka-python codec cost: {theirs / ours:.2f}")


if __name__ == "__main__":
    main()
