from resilient_app import answer


def test_the_app_waits_out_a_rate_limit(fakehop_env):
    fakehop_env.fault("rate_limit", times=2, retry_after=0.2)
    assert answer("Hi") == "Hello! How can I help you today?"
    fakehop_env.assert_client_ok()
