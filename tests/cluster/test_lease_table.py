"""The semaphore's lease table on a fake clock: no Ray, milliseconds."""

from __future__ import annotations

from cluster.semaphore import LeaseTable


def _table(*, permits: int = 4, recovering: bool = False) -> LeaseTable:
    return LeaseTable("t", permits, 1.5, now=0.0, recovering=recovering)


def test_grants_up_to_the_smaller_of_limit_and_permits() -> None:
    table = _table(permits=3)
    outcomes = [table.request(f"a{i}", "h", 4, 0.0)[0] for i in range(4)]
    assert outcomes == ["granted", "granted", "granted", "parked"]
    assert table.request("b", "h", 1, 0.0)[0] == "parked"
    assert table.statistics()["held"] == 3


def test_head_of_the_queue_is_never_overtaken() -> None:
    table = _table()
    table.request("a", "h", 4, 0.0)
    table.request("b", "h", 4, 0.0)
    assert table.request("narrow", "h", 2, 0.0)[0] == "parked"  # 2 held, limit 2
    assert table.request("wide", "h", 4, 0.0)[0] == "parked"  # would fit, but must queue
    released, decided = table.release("a", 0.1)  # 1 held: narrow first, then wide
    assert released and decided == [("narrow", "granted"), ("wide", "granted")]



def test_recovering_grants_nothing_and_renewals_re_register_leases() -> None:
    table = _table(recovering=True)
    assert table.request("new", "h", 4, 0.1)[0] == "parked"
    results, _ = table.renew([("old1", "h", 4), ("old2", "h", 4)], 0.2)
    assert results == [True, True]
    assert table.statistics()["held"] == 2 and table.state == "recovering"
    assert table.tick(1.5) == [("new", "granted")]
    assert table.state == "serving"
    assert table.renew([("unknown", "h", 4)], 1.6)[0] == [False]


def test_a_recovery_held_open_outlasts_its_window_until_the_service_ends_the_hold() -> None:
    table = LeaseTable("t", 4, 1.5, now=0.0, recovering=True, held_open=True)
    assert table.request("new", "h", 4, 0.1)[0] == "parked"
    assert table.tick(100.0) == [] and table.state == "recovering"  # an owner from before has not answered
    results, _ = table.renew([("paused", "h", 4, 7, True)], 200.0)  # it resumes and renews
    assert results == [True] and table.statistics()["held"] == 1
    assert table.end_hold(200.1) == [("new", "granted")]
    assert table.state == "serving" and table.statistics()["held"] == 2
    assert table.statistics()["generation"] == 8  # fencing goes on past the re-registered lease


def test_unrenewed_leases_expire_and_their_permit_goes_to_the_next_waiter() -> None:
    table = _table(permits=1)
    table.request("a", "h", 1, 0.0)
    table.request("b", "h", 1, 0.0)
    assert table.renew([("a", "h", 1)], 1.0)[0] == [True]
    assert table.tick(2.4) == []
    assert table.tick(2.5) == [("b", "granted")]
    stats = table.statistics()
    assert (stats["expired_total"], stats["held"]) == (1, 1)


def test_a_request_released_before_it_arrives_is_never_granted() -> None:
    table = _table()
    assert table.release("late", 0.0)[0] is False
    assert table.request("late", "h", 4, 0.1)[0] == "withdrawn"
    assert table.statistics()["held"] == 0


def test_a_timed_out_request_granted_meanwhile_stays_granted() -> None:
    table = _table(permits=1)
    table.request("a", "h", 1, 0.0)
    table.request("b", "h", 1, 0.0)
    table.release("a", 0.1)
    assert table.give_up("b", 0.2)[0] == "granted"
    table.request("c", "h", 1, 0.2)
    assert table.give_up("c", 0.3)[0] == "timeout"
    assert table.statistics()["waiting"] == 0


def _guarded(table: LeaseTable, lease_id: str, holder: str, now: float) -> str:
    return table.request(lease_id, holder, 4, now, guarded=True)[0]


def test_a_suspected_holder_is_probed_at_once_and_its_word_frees_nothing() -> None:
    table = _table(permits=2)
    _guarded(table, "dead", "actor:old", 0.0)
    _guarded(table, "other", "actor:other", 0.0)
    assert table.request("next", "h", 4, 0.0)[0] == "parked"
    assert table.due_probes(0.1) == {}  # renewed a moment ago: nothing to ask yet
    suspects, decided = table.suspect(["actor:old"], 0.1)
    assert (suspects, decided) == (1, [])
    assert table.statistics()["held"] == 2  # a report alone frees nothing
    assert table.due_probes(0.1) == {"actor:old": ["dead"]}  # only the suspect's lease, long before its TTL
    assert table.probe_answered("dead", False, 0.2) == [("next", "granted")]  # Ray's verdict frees it
    stats = table.statistics()
    assert (stats["held"], stats["expired_total"], stats["suspects"]) == (2, 1, 0)


def test_a_suspected_holder_that_answers_alive_keeps_its_lease() -> None:
    table = _table(permits=1)
    _guarded(table, "a", "actor:alive", 0.0)
    table.request("next", "h", 1, 0.0)
    table.suspect(["actor:alive"], 0.1)
    assert table.due_probes(0.1) == {"actor:alive": ["a"]}
    assert table.probe_answered("a", None, 0.2) == []  # no verdict yet (restarting?): asked again
    assert table.due_probes(0.3) == {"actor:alive": ["a"]}
    assert table.probe_answered("a", True, 0.4) == []
    assert table.due_probes(0.5) == {}  # renewed by its answer
    stats = table.statistics()
    assert (stats["held"], stats["waiting"], stats["expired_total"]) == (1, 1, 0)


def test_a_suspect_report_leaves_plain_leases_to_their_ttl() -> None:
    table = _table(permits=1)
    table.request("plain", "p", 1, 0.0)
    assert table.suspect(["p"], 0.1) == (0, [])
    assert table.due_probes(0.1) == {}
    assert table.statistics()["held"] == 1


def test_a_late_give_back_from_a_dead_holder_is_refused() -> None:
    table = _table(permits=1)
    _guarded(table, "dead", "actor:old", 0.0)
    table.request("next", "h", 1, 0.0)
    table.suspect(["actor:old"], 0.1)
    table.due_probes(0.1)
    table.probe_answered("dead", False, 0.2)
    # The dead incarnation's release and renewal, arriving late, change nothing: its id is buried.
    assert table.release("dead", 0.3) == (False, [])
    assert table.renew([("dead", "actor:old", 1, 1, True)], 0.3)[0] == [False]
    assert table.request("dead", "actor:old", 1, 0.3)[0] == "withdrawn"
    stats = table.statistics()
    assert (stats["held"], stats["released_total"]) == (1, 0)
    assert table.generation_of("next") == 2
