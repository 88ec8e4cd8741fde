from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mover.testing.certs import Issued, Pki
from tests.security.helpers import SecureBroker


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_cert(pki: Pki) -> Issued:
    return pki.issue("localhost", server=True)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    """One daemon with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners, shared by a module's tests."""
    b = SecureBroker(tmp_path_factory.mktemp("broker"), pki, server_cert)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    b = SecureBroker(tmp_path, pki, server_cert)
    yield b
    b.stop()
