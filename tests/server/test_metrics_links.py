"""/metrics of a cluster's leader: one family per link figure, labelled from and to."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from raftmq.server.admin.metrics import exposition, metrics_registry


def test_each_link_has_its_samples() -> None:
    links = [
        {"from": "g1", "to": "g2", "state": "connected", "forwarded": 7, "batches": 2, "refused": 0, "waiting": 3,
         "in_flight": 2, "adverts_sent": 5, "forwarded_first": 11, "fell_back": 3},
        {"from": "g1", "to": "g3", "state": "retrying", "forwarded": 0, "refused": 1, "waiting": 40, "in_flight": 0,
         "adverts_sent": 0},
    ]
    status = {"group": "g1", "node": "n1", "role": "leader", "health": "ok", "cluster": {"links": links}}
    text = exposition(metrics_registry(lambda: status)).decode()
    samples = {
        (sample.name, sample.labels.get("to_group")): sample.value
        for family in text_string_to_metric_families(text) if family.name.startswith("raftmq_link")
        for sample in family.samples
    }
    assert samples[("raftmq_link_connected", "g2")] == 1 and samples[("raftmq_link_connected", "g3")] == 0
    assert samples[("raftmq_link_waiting", "g3")] == 40 and samples[("raftmq_link_in_flight", "g2")] == 2
    assert samples[("raftmq_link_forwarded_total", "g2")] == 7 and samples[("raftmq_link_refused_total", "g3")] == 1
    assert samples[("raftmq_link_adverts_sent_total", "g2")] == 5 and samples[("raftmq_link_batches_total", "g2")] == 2
    assert samples[("raftmq_link_forwarded_first_total", "g2")] == 11
    assert samples[("raftmq_link_fell_back_total", "g2")] == 3
