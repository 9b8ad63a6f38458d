import pytest
from resilient_app import FALLBACK, answer

FAULTS = [{"kind": "rate_limit", "retry_after": 0.2}, "server_error", {"kind": "http_error", "status": 403}]


@pytest.mark.fakehop_sweep(faults=FAULTS)
def test_the_app_survives(fakehop_env):
    assert answer("Hi") in ("Hello! How can I help you today?", FALLBACK)
    fakehop_env.assert_client_ok()
