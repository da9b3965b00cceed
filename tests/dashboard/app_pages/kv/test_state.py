"""The KV lab's part of the link."""

from dashboard.app_pages.kv.state import KVState


def test_the_kv_pages_settings_round_trip_and_bad_ones_are_explained():
    """What if it attended less?: the text, its length, the policies and budgets swept (comma-separated, in one
    order), the sinks and the one policy and budget shown; a link's budget of 0 or unknown policy is said, the
    default kept."""
    state = KVState(kv_text="sidebar", kv_tokens=512, kv_policies="window,tova,strided", kv_budgets="8,64", kv_sinks=2,
                    kv_policy="tova", kv_budget=8)
    back, problems = KVState.from_query(state.to_query())
    assert back == state and problems == []
    assert KVState().to_query() == {}
    messy, problems = KVState.from_query({"kv_policies": "tova, window,tova", "kv_budgets": "64, 8,8"})
    assert (messy.kv_policies, messy.kv_budgets, problems) == ("window,tova", "8,64", [])  # one spelling each
    state, problems = KVState.from_query({"kv_budgets": "0,16", "kv_budget": "0", "kv_policies": "lru",
                                          "kv_text": "web", "kv_sinks": "0", "kv_policy": "full"})
    assert state == KVState()
    assert len(problems) == 6
    assert any("kv_budgets='0,16'" in p and "from 1 to 8,192" in p for p in problems)
    assert any("kv_budget='0'" in p and "1 or more" in p for p in problems)
