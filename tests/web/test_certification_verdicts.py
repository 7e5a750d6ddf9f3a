"""Both verdicts in the API, and a badge that names the verdict it shows."""

from __future__ import annotations

import re

from tests.web.conftest import login


def test_api_records_both_verdicts_and_the_badges_method(client, seeded):
    r = client.get(f"/api/v1/datasets/{seeded.dataset_id}/certifications?latest=true",
                   headers=seeded.tenant.auth("admin"))
    latest = r.get_json()["items"]
    assert latest
    for c in latest:
        assert c["method"] == "anytime"  # the default
        assert c["certified"] == c["certified_anytime"]
        assert c["certified_anytime"] == (c["s_anytime_t"] is not None and c["s_anytime_t"] >= 0.95)
        assert c["certified_paper"] == (c["s_oms_t"] is not None and c["s_oms_t"] >= 0.95)
        assert c["s_anytime_e"] is None or -1.0 <= c["s_anytime_e"] <= 1.0


def test_model_page_says_which_verdict_a_badge_used(app, seeded):
    client = app.test_client()
    assert login(client, seeded.tenant).status_code == 302
    html = client.get(f"/models/{seeded.model_id}?dataset_id={seeded.dataset_id}").get_data(as_text=True)
    assert "S (anytime, U<sub>t</sub>)" in html
    badges = re.findall(r'<span class="badge (?:ok|no)"[^>]*>([^<]*)</span>', html)
    assert badges and all(b.endswith("anytime)") for b in badges), badges
    assert "valid however often the audits re-check it" in html
